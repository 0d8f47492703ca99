package dradriver

import (
	"context"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// claimStatuses keeps the device statuses of the prepared claims current
// in the API, off the prepare path: prepare only marks a claim, and one
// goroutine writes what changed (after prepare, after each new view of the
// node, and a clear after unprepare). A failed write is tried again, after
// a pause that grows while the claim's writes keep failing.
type claimStatuses struct {
	mu      sync.Mutex
	claims  map[types.UID]*trackedClaim
	pending map[types.UID]bool
	wake    chan struct{}
}

type trackedClaim struct {
	claim   *resourceapi.ResourceClaim
	since   metav1.Time // when it was prepared: the Ready condition's time
	applied []resourceapi.AllocatedDeviceStatus
	written bool // applied is what the API has
	gone    bool // unprepared: clear our entries, then forget it
	// failures counts the failed writes in a row, for the next pause.
	failures int
}

// retryAfter is the pause before a failed status write is tried again;
// it doubles with each failure of the claim's writes in a row, up to
// maxRetryAfter, so an API server that is away for minutes sees a few
// writes a claim, and one that returns sees the statuses within
// maxRetryAfter.
var retryAfter, maxRetryAfter = time.Second, 16 * time.Second

// retryDelay is the pause after the failures-th failed write in a row.
func retryDelay(failures int) time.Duration {
	d := retryAfter
	for i := 1; i < failures && d < maxRetryAfter; i++ {
		d *= 2
	}
	return min(d, maxRetryAfter)
}

func newClaimStatuses() *claimStatuses {
	return &claimStatuses{claims: map[types.UID]*trackedClaim{}, pending: map[types.UID]bool{}, wake: make(chan struct{}, 1)}
}

func (c *claimStatuses) mark(uid types.UID) {
	c.pending[uid] = true
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// track starts reporting claim's devices, prepared at since.
func (c *claimStatuses) track(claim *resourceapi.ResourceClaim, since metav1.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.claims[claim.UID]; ok && !t.gone {
		t.claim, t.since = claim, since
	} else {
		c.claims[claim.UID] = &trackedClaim{claim: claim, since: since}
	}
	c.mark(claim.UID)
}

// untrack clears the claim's entries; an unknown claim is ignored.
func (c *claimStatuses) untrack(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.claims[uid]; ok {
		t.gone = true
		c.mark(uid)
	}
}

// refresh recomputes every tracked claim (the node changed).
func (c *claimStatuses) refresh() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.claims {
		c.mark(uid)
	}
}

// statusWriter applies a claim's statuses (nil clears them).
type statusWriter func(ctx context.Context, claim *resourceapi.ResourceClaim, statuses []resourceapi.AllocatedDeviceStatus) error

// run writes pending claims until ctx ends. desired computes a claim's
// statuses from the driver's current view.
func (c *claimStatuses) run(ctx context.Context, desired func(*resourceapi.ResourceClaim, metav1.Time) []resourceapi.AllocatedDeviceStatus,
	write statusWriter, log logrus.FieldLogger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		c.mu.Lock()
		var work []types.UID
		for uid := range c.pending {
			work = append(work, uid)
		}
		clear(c.pending)
		c.mu.Unlock()
		for _, uid := range work {
			c.writeOne(ctx, uid, desired, write, log)
		}
	}
}

func (c *claimStatuses) writeOne(ctx context.Context, uid types.UID, desired func(*resourceapi.ResourceClaim, metav1.Time) []resourceapi.AllocatedDeviceStatus,
	write statusWriter, log logrus.FieldLogger) {
	c.mu.Lock()
	t, ok := c.claims[uid]
	if !ok {
		c.mu.Unlock()
		return
	}
	claim, since, gone := t.claim, t.since, t.gone
	c.mu.Unlock()
	var want []resourceapi.AllocatedDeviceStatus
	if !gone {
		want = desired(claim, since)
	}
	c.mu.Lock()
	same := t.written && equality.Semantic.DeepEqual(want, t.applied)
	c.mu.Unlock()
	var err error
	if !same {
		err = write(ctx, claim, want)
	}
	if gone && apierrors.IsNotFound(err) {
		err = nil // the claim went first: nothing to clear
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		t.failures++
		pause := retryDelay(t.failures)
		log.Warnf("status of claim %s/%s: %v; trying again in %v", claim.Namespace, claim.Name, err, pause)
		time.AfterFunc(pause, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.mark(uid)
		})
		return
	}
	t.failures = 0
	if t.gone != gone { // unprepared meanwhile: the clear is pending
		return
	}
	if gone {
		delete(c.claims, uid)
		return
	}
	t.applied, t.written = want, true
}
