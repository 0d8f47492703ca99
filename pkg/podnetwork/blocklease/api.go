package blocklease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
)

// API is what the Holder asks of the API server: the address Leases of
// one namespace, and a Node's uid (the Leases' owner). Its errors are
// the API server's (k8s.io/apimachinery/pkg/api/errors reads them).
type API interface {
	// List gives every Lease labeled apis.AddressBlockLabel.
	List(ctx context.Context) ([]coordinationv1.Lease, error)
	Get(ctx context.Context, name string) (*coordinationv1.Lease, error)
	Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
	// Update writes l if its resourceVersion is still the stored one.
	Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
	// Delete removes l if its resourceVersion is still the stored one.
	Delete(ctx context.Context, l *coordinationv1.Lease) error
	NodeUID(ctx context.Context, node string) (types.UID, error)
}

// restAPI speaks to the API server with client-go's REST client and a
// scheme of the Lease kind alone: the typed clientset registers every API
// group, and rdma-cdi-agent links none but the ones it uses (test/arch).
type restAPI struct {
	leases, core *rest.RESTClient
	namespace    string
	params       runtime.ParameterCodec
}

// ForConfig is the API of the server cfg names, for the Leases of
// namespace.
func ForConfig(cfg *rest.Config, namespace string) (API, error) {
	if namespace == "" {
		return nil, errors.New("address leases: no namespace (the agent's own, --namespace)")
	}
	scheme := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	clientOf := func(apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg)
		c.APIPath, c.GroupVersion = apiPath, &gv
		return rest.RESTClientForConfigAndClient(c, httpClient)
	}
	a := restAPI{namespace: namespace, params: runtime.NewParameterCodec(scheme)}
	if a.leases, err = clientOf("/apis", coordinationv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	// The core group, for a Node's metadata alone, read raw: its scheme
	// would link the whole core API.
	if a.core, err = clientOf("/api", schema.GroupVersion{Version: "v1"}); err != nil {
		return nil, err
	}
	return a, nil
}

func (a restAPI) List(ctx context.Context) ([]coordinationv1.Lease, error) {
	var out coordinationv1.LeaseList
	err := a.leases.Get().Namespace(a.namespace).Resource("leases").
		VersionedParams(&metav1.ListOptions{LabelSelector: apis.AddressBlockLabel}, a.params).Do(ctx).Into(&out)
	return out.Items, err
}

func (a restAPI) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	return out, a.leases.Get().Namespace(a.namespace).Resource("leases").Name(name).Do(ctx).Into(out)
}

func (a restAPI) Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	return out, a.leases.Post().Namespace(a.namespace).Resource("leases").Body(l).Do(ctx).Into(out)
}

func (a restAPI) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	return out, a.leases.Put().Namespace(a.namespace).Resource("leases").Name(l.Name).Body(l).Do(ctx).Into(out)
}

func (a restAPI) Delete(ctx context.Context, l *coordinationv1.Lease) error {
	rv := l.ResourceVersion
	opts := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}
	return a.leases.Delete().Namespace(a.namespace).Resource("leases").Name(l.Name).Body(opts).Do(ctx).Error()
}

func (a restAPI) NodeUID(ctx context.Context, node string) (types.UID, error) {
	raw, err := a.core.Get().Resource("nodes").Name(node).DoRaw(ctx)
	if err != nil {
		return "", err
	}
	var meta struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &meta); err != nil || meta.Metadata.UID == "" {
		return "", fmt.Errorf("node %s: no uid in the API server's answer (%v)", node, err)
	}
	return meta.Metadata.UID, nil
}
