package blocklease

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork"
)

// serve is the API server's HTTP for what restAPI asks, over c: the
// paths, the label selector, the Status of each error.
func serve(t *testing.T, c *cluster) *httptest.Server {
	leases := "/apis/coordination.k8s.io/v1/namespaces/" + namespace + "/leases"
	fake := c.api()
	reply := func(w http.ResponseWriter, obj runtime.Object, kind string, err error) {
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			status := apierrors.APIStatus(nil)
			if !errors.As(err, &status) {
				status = apierrors.NewInternalError(err)
			}
			s := status.Status()
			s.APIVersion, s.Kind = "v1", "Status"
			w.WriteHeader(int(s.Code))
			_ = json.NewEncoder(w).Encode(s)
			return
		}
		obj.GetObjectKind().SetGroupVersionKind(coordinationv1.SchemeGroupVersion.WithKind(kind))
		_ = json.NewEncoder(w).Encode(obj)
	}
	body := func(r *http.Request, into any) {
		if err := json.NewDecoder(r.Body).Decode(into); err != nil {
			t.Errorf("%s %s: %v", r.Method, r.URL, err)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+leases, func(w http.ResponseWriter, r *http.Request) {
		if got := r.URL.Query().Get("labelSelector"); got != apis.AddressBlockLabel {
			t.Errorf("list with labelSelector %q, want %q", got, apis.AddressBlockLabel)
		}
		items, err := fake.List(r.Context())
		reply(w, &coordinationv1.LeaseList{Items: items}, "LeaseList", err)
	})
	mux.HandleFunc("GET "+leases+"/{name}", func(w http.ResponseWriter, r *http.Request) {
		l, err := fake.Get(r.Context(), r.PathValue("name"))
		reply(w, l, "Lease", err)
	})
	mux.HandleFunc("POST "+leases, func(w http.ResponseWriter, r *http.Request) {
		var l coordinationv1.Lease
		body(r, &l)
		out, err := fake.Create(r.Context(), &l)
		reply(w, out, "Lease", err)
	})
	mux.HandleFunc("PUT "+leases+"/{name}", func(w http.ResponseWriter, r *http.Request) {
		var l coordinationv1.Lease
		body(r, &l)
		if l.Name != r.PathValue("name") {
			t.Errorf("PUT %s of lease %s", r.URL, l.Name)
		}
		out, err := fake.Update(r.Context(), &l)
		reply(w, out, "Lease", err)
	})
	mux.HandleFunc("DELETE "+leases+"/{name}", func(w http.ResponseWriter, r *http.Request) {
		var opts metav1.DeleteOptions
		body(r, &opts)
		err := c.client.CoordinationV1().Leases(namespace).Delete(r.Context(), r.PathValue("name"), opts)
		reply(w, &metav1.Status{Status: metav1.StatusSuccess}, "Status", err)
	})
	mux.HandleFunc("GET /api/v1/nodes/{name}", func(w http.ResponseWriter, r *http.Request) {
		n, err := c.client.CoreV1().Nodes().Get(r.Context(), r.PathValue("name"), metav1.GetOptions{})
		if err == nil {
			n.APIVersion, n.Kind = "v1", "Node"
		}
		reply(w, n, "Node", err)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.NotFound(w, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// The REST client the agents use reaches the Leases and the Node where
// the API server has them, and its errors read as the server's: a create
// of an existing Lease, a write or delete of an old version, a missing
// one.
func TestRESTAPI(t *testing.T) {
	c := newCluster(t, "a")
	srv := serve(t, c)
	api, err := ForConfig(&rest.Config{Host: srv.URL}, namespace)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if uid, err := api.NodeUID(ctx, "a"); err != nil || uid != "uid-a" {
		t.Fatalf("NodeUID(a) = %q, %v", uid, err)
	}
	if _, err := api.NodeUID(ctx, "gone"); !apierrors.IsNotFound(err) {
		t.Errorf("NodeUID of a missing node: %v", err)
	}
	h := New(Options{API: api, Node: "a", ReclaimAfter: reclaim, Log: quietLog()})
	h.nodeUID = "uid-a"
	l := h.newLease(podnetwork.BlockName(mustRange(t, "10.0.61.128-10.0.61.143")), apis.AddressBlockPool, mustRange(t, "10.0.61.128-10.0.61.143"))
	created, err := api.Create(ctx, l)
	if err != nil || created.ResourceVersion == "" || *created.Spec.HolderIdentity != "a" {
		t.Fatalf("Create: %+v, %v", created, err)
	}
	if _, err := api.Create(ctx, l); !apierrors.IsAlreadyExists(err) {
		t.Errorf("Create of an existing lease: %v", err)
	}
	updated, err := api.Update(ctx, created)
	if err != nil || updated.ResourceVersion == created.ResourceVersion {
		t.Fatalf("Update: %+v, %v", updated, err)
	}
	if _, err := api.Update(ctx, created); !apierrors.IsConflict(err) {
		t.Errorf("Update of an old version: %v", err)
	}
	if err := api.Delete(ctx, created); !apierrors.IsConflict(err) {
		t.Errorf("Delete of an old version: %v", err)
	}
	list, err := api.List(ctx)
	if err != nil || len(list) != 1 || list[0].Annotations[apis.AddressRangeAnnotation] != "10.0.61.128-10.0.61.143" {
		t.Fatalf("List: %+v, %v", list, err)
	}
	if err := api.Delete(ctx, updated); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := api.Get(ctx, l.Name); !apierrors.IsNotFound(err) {
		t.Errorf("Get of a deleted lease: %v", err)
	}
	if _, err := ForConfig(&rest.Config{Host: srv.URL}, ""); err == nil || !strings.Contains(err.Error(), "namespace") {
		t.Errorf("no namespace: %v", err)
	}
}
