package metricsauth

import (
	"context"
	"errors"
	"fmt"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Reviewer asks the API server who a token is and what a user may do.
type Reviewer interface {
	ReviewToken(context.Context, *authnv1.TokenReview) (*authnv1.TokenReview, error)
	ReviewAccess(context.Context, *authzv1.SubjectAccessReview) (*authzv1.SubjectAccessReview, error)
	// SigningKeys is the service account issuer's JSON Web Key Set (the
	// API server's /openid/v1/jwks, readable by every service account
	// through the default system:service-account-issuer-discovery binding).
	SigningKeys(context.Context) ([]byte, error)
}

// The reviews an agent sends, both kinds together: client-go's own
// defaults, made explicit and shared by the two clients, so that a flood
// of bad tokens costs the API server at most this much per node.
const (
	reviewsPerSecond = 5
	reviewBurst      = 10
)

// InCluster is the Reviewer of the pod's own API server, as its service
// account (KUBERNETES_SERVICE_HOST, the mounted token and CA). Outside a
// pod it fails.
func InCluster() (Reviewer, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no in-cluster config (a pod's KUBERNETES_SERVICE_HOST and service account token): %w", err)
	}
	return ForConfig(cfg)
}

// restReviewer posts reviews with client-go's REST client. Its scheme
// knows the two review kinds alone: client-go's typed clients register
// every API group (kubernetes/scheme), which would double the agent's
// binary.
type restReviewer struct {
	authn, authz *rest.RESTClient
}

// ForConfig is the Reviewer of the API server cfg names.
func ForConfig(cfg *rest.Config) (Reviewer, error) {
	scheme := runtime.NewScheme()
	if err := errors.Join(authnv1.AddToScheme(scheme), authzv1.AddToScheme(scheme)); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(reviewsPerSecond, reviewBurst)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	clientOf := func(gv schema.GroupVersion) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg) // the copy shares the rate limiter
		c.GroupVersion = &gv
		return rest.RESTClientForConfigAndClient(c, httpClient)
	}
	var r restReviewer
	if r.authn, err = clientOf(authnv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if r.authz, err = clientOf(authzv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	return r, nil
}

func (r restReviewer) ReviewToken(ctx context.Context, review *authnv1.TokenReview) (*authnv1.TokenReview, error) {
	return create(ctx, r.authn, "tokenreviews", review, &authnv1.TokenReview{})
}

func (r restReviewer) ReviewAccess(ctx context.Context, review *authzv1.SubjectAccessReview) (*authzv1.SubjectAccessReview, error) {
	return create(ctx, r.authz, "subjectaccessreviews", review, &authzv1.SubjectAccessReview{})
}

func (r restReviewer) SigningKeys(ctx context.Context) ([]byte, error) {
	return r.authn.Get().AbsPath("/openid/v1/jwks").MaxRetries(0).Do(ctx).Raw()
}

// create posts in to resource and decodes the answer into out. It does not
// retry: the scrape answers 503 and the next one asks again.
func create[T runtime.Object](ctx context.Context, c *rest.RESTClient, resource string, in, out T) (T, error) {
	err := c.Post().Resource(resource).Body(in).MaxRetries(0).Do(ctx).Into(out)
	return out, err
}
