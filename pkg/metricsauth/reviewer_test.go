package metricsauth

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/rest"
)

// apiServer answers a POST of each route's path with what its function
// makes of the posted body.
func apiServer(t *testing.T, routes map[string]func(body []byte) any) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route, ok := routes[r.URL.Path]
		if r.Method != http.MethodPost || !ok {
			http.Error(w, r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(route(body)); err != nil {
			t.Error(err)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// decode reads body into into, and checks its apiVersion and kind.
func decode(t *testing.T, body []byte, apiVersion, kind string, into any) {
	t.Helper()
	var meta struct{ APIVersion, Kind string }
	if err := json.Unmarshal(body, &meta); err != nil || meta.APIVersion != apiVersion || meta.Kind != kind {
		t.Errorf("posted %s, want %s %s (%v)", body, apiVersion, kind, err)
	}
	if err := json.Unmarshal(body, into); err != nil {
		t.Error(err)
	}
}

// The REST reviewer posts both reviews where the API server serves them,
// and reads the answers.
func TestRESTReviewerPostsTheReviews(t *testing.T) {
	srv := apiServer(t, map[string]func([]byte) any{
		"/apis/authentication.k8s.io/v1/tokenreviews": func(body []byte) any {
			var tr authnv1.TokenReview
			decode(t, body, "authentication.k8s.io/v1", "TokenReview", &tr)
			tr.Status = authnv1.TokenReviewStatus{Authenticated: tr.Spec.Token == "good", User: authnv1.UserInfo{Username: "prom"}}
			return tr
		},
		"/apis/authorization.k8s.io/v1/subjectaccessreviews": func(body []byte) any {
			var sar authzv1.SubjectAccessReview
			decode(t, body, "authorization.k8s.io/v1", "SubjectAccessReview", &sar)
			sar.Status.Allowed = sar.Spec.NonResourceAttributes != nil && sar.Spec.NonResourceAttributes.Path == "/metrics"
			return sar
		},
	})
	r, err := ForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tr, err := r.ReviewToken(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: "good"}})
	if err != nil || !tr.Status.Authenticated || tr.Status.User.Username != "prom" {
		t.Errorf("TokenReview: %+v, %v", tr, err)
	}
	sar, err := r.ReviewAccess(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: "prom", NonResourceAttributes: &authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
	}})
	if err != nil || !sar.Status.Allowed {
		t.Errorf("SubjectAccessReview: %+v, %v", sar, err)
	}
}

// An API server that answers an error is an error, not a verdict.
func TestRESTReviewerReportsErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "etcd is down", http.StatusInternalServerError)
	}))
	defer srv.Close()
	r, err := ForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReviewToken(context.Background(), &authnv1.TokenReview{}); err == nil {
		t.Error("a 500 from the API server gave no error")
	}
}

func TestInClusterNeedsAPod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	if _, err := InCluster(); err == nil || !strings.Contains(err.Error(), "in-cluster config") {
		t.Errorf("InCluster outside a pod: %v, want an error that says so", err)
	}
}
