package blocklease

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
)

const namespace = "rdma-cdi"

// cluster is an API server stand-in: client-go's fake clientset, with the
// optimistic concurrency the real one has (a write or delete of an old
// resourceVersion is a Conflict), nodes, and hooks that let a test fail
// calls or make another node move first.
type cluster struct {
	t      *testing.T
	client *fake.Clientset

	mu sync.Mutex
	rv int
	// down fails every call while set.
	down error
	// beforeWrite, when set, runs once before the next Lease write.
	beforeWrite func(verb, name string)
}

func newCluster(t *testing.T, nodes ...string) *cluster {
	c := &cluster{t: t, client: fake.NewClientset()}
	for _, n := range nodes {
		c.addNode(n)
	}
	leases := coordinationv1.SchemeGroupVersion.WithResource("leases")
	stored := func(name string) (*coordinationv1.Lease, error) {
		obj, err := c.client.Tracker().Get(leases, namespace, name)
		if err != nil {
			return nil, err
		}
		return obj.(*coordinationv1.Lease), nil
	}
	c.client.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.down != nil {
			return true, nil, c.down
		}
		if a.GetResource().Resource != "leases" {
			return false, nil, nil
		}
		// By verb: an UpdateAction is a CreateAction too, by its methods.
		switch a.GetVerb() {
		case "create":
			c.rv++
			a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).ResourceVersion = strconv.Itoa(c.rv)
		case "update":
			l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
			if cur, err := stored(l.Name); err == nil && cur.ResourceVersion != l.ResourceVersion {
				return true, nil, apierrors.NewConflict(leases.GroupResource(), l.Name, errors.New("the object has been modified"))
			}
			c.rv++
			l.ResourceVersion = strconv.Itoa(c.rv)
		case "delete":
			a := a.(k8stesting.DeleteAction)
			cur, err := stored(a.GetName())
			if p := a.GetDeleteOptions().Preconditions; err == nil && p != nil && p.ResourceVersion != nil && *p.ResourceVersion != cur.ResourceVersion {
				return true, nil, apierrors.NewConflict(leases.GroupResource(), a.GetName(), errors.New("precondition failed"))
			}
		}
		return false, nil, nil
	})
	return c
}

// setDown fails every call with err from now on (nil: none).
func (c *cluster) setDown(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = err
}

func (c *cluster) addNode(name string) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
	if _, err := c.client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// collectGarbage deletes what the garbage collector would once node is
// deleted: its Node and the Leases it owns.
func (c *cluster) collectGarbage(node string) {
	ctx := context.Background()
	uid := types.UID("uid-" + node)
	if err := c.client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	for _, l := range c.leases() {
		for _, o := range l.OwnerReferences {
			if o.Kind == "Node" && o.APIVersion == "v1" && o.UID == uid {
				if err := c.client.CoordinationV1().Leases(namespace).Delete(ctx, l.Name, metav1.DeleteOptions{}); err != nil {
					c.t.Fatal(err)
				}
			}
		}
	}
}

func (c *cluster) leases() []coordinationv1.Lease {
	list, err := c.client.CoordinationV1().Leases(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return list.Items
}

// api is node's view of the cluster.
func (c *cluster) api() API { return fakeAPI{c} }

type fakeAPI struct{ c *cluster }

func (f fakeAPI) leases() leaseClient { return f.c.client.CoordinationV1().Leases(namespace) }

type leaseClient interface {
	List(context.Context, metav1.ListOptions) (*coordinationv1.LeaseList, error)
	Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(context.Context, *coordinationv1.Lease, metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(context.Context, *coordinationv1.Lease, metav1.UpdateOptions) (*coordinationv1.Lease, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}

func (f fakeAPI) List(ctx context.Context) ([]coordinationv1.Lease, error) {
	list, err := f.leases().List(ctx, metav1.ListOptions{LabelSelector: apis.AddressBlockLabel})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (f fakeAPI) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return f.leases().Get(ctx, name, metav1.GetOptions{})
}

// hook runs the pending beforeWrite, outside the cluster's lock.
func (f fakeAPI) hook(verb, name string) {
	f.c.mu.Lock()
	before := f.c.beforeWrite
	f.c.beforeWrite = nil
	f.c.mu.Unlock()
	if before != nil {
		before(verb, name)
	}
}

func (f fakeAPI) Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	f.hook("create", l.Name)
	return f.leases().Create(ctx, l, metav1.CreateOptions{})
}

func (f fakeAPI) Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	f.hook("update", l.Name)
	return f.leases().Update(ctx, l, metav1.UpdateOptions{})
}

func (f fakeAPI) Delete(ctx context.Context, l *coordinationv1.Lease) error {
	rv := l.ResourceVersion
	return f.leases().Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
}

func (f fakeAPI) NodeUID(ctx context.Context, node string) (types.UID, error) {
	n, err := f.c.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return n.UID, nil
}

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	return l
}
