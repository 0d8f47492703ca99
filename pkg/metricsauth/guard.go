// Package metricsauth puts the agents' /metrics behind the API server, the
// way Kubernetes components guard theirs (controller-runtime's metrics
// filters, kube-rbac-proxy): the request's bearer token is authenticated
// with a TokenReview, then its user must be allowed, by a
// SubjectAccessReview, to get the nonResourceURL path. No token or a bad
// one gets 401, a user without the right 403, and a review that fails
// (the API server is down) 503: never the metrics.
//
// The token must be one issued for Audience (a projected service account
// token with that audience), not for the API server: a scrape token that
// leaks from the node's network is then no key to the API.
package metricsauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"encoding/base64"
	"encoding/json"

	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/cache"
)

// Audience is the audience a scraper's token must be issued for: the
// TokenReview asks for it alone, so a token for the API server (a pod's
// default one) is refused here, and one for /metrics is refused by the API
// server. A Prometheus in the cluster mounts a projected service account
// token with this audience.
const Audience = "rdma-cdi-metrics"

const (
	// Verdicts are cached by the token's hash, so that a Prometheus
	// scraping every 15 s costs two reviews a minute. allowedTTL bounds how
	// long a revoked token or binding still reads; refusedTTL how long a
	// Prometheus just bound is still refused.
	allowedTTL = time.Minute
	refusedTTL = 30 * time.Second
	// A token allowed before is remembered this long after its verdict
	// expired, as one that may wait for the slot kept for such tokens: a
	// flood of unknown tokens holding every other slot cannot turn a
	// Prometheus whose verdict is due again away with 503s. It is no
	// verdict: such a token is reviewed again.
	passedTTL = 10 * time.Minute
	// The caches are bounded, and apart: a flood of bad tokens fills only
	// the refused one, and cannot push Prometheus' token out.
	maxAllowed = 64
	maxRefused = 1024
	// Beyond this many reviews at once, a request that misses the caches
	// gets 503 without asking the API server; a token allowed before
	// waits for one more slot of its own instead (passedTTL).
	maxReviewsInFlight = 3
	maxPassedInFlight  = 1
	reviewTimeout      = 10 * time.Second
	// A token longer than any the API server issues is refused unread:
	// each review sends the token to the API server.
	maxTokenBytes = 16 << 10
	// Reviews of tokens the guard has not allowed before are paced: a
	// client sending a new random token per request would otherwise turn
	// each into a TokenReview against the API server. Beyond the burst,
	// such a request gets 503 until the bucket refills; a token allowed
	// before is never paced.
	unknownReviewsPerSecond = 10
	unknownReviewBurst      = 20
	// Review errors are logged at error level once a minute, the rest at
	// debug level: an API server outage must not flood the agent's log.
	errorLogEvery = time.Minute
)

// errBusy is the answer to a request that found every review slot taken.
var errBusy = errors.New("too many token reviews in flight")

// Guard authenticates and authorizes requests for one nonResourceURL path.
type Guard struct {
	reviews   Reviewer
	path      string
	audiences []string // what the TokenReview asks a token to be for
	log       *errorLog
	now       func() time.Time

	// allowed holds passed entries for passedTTL, refused verdicts for
	// refusedTTL, both by token hash; subjects the users allowed, for
	// passedTTL, whose renewed tokens are known too (rotation.go).
	allowed, refused, subjects *cache.LRUExpireCache
	keys                       *signingKeys
	slots                      chan struct{} // one per review in flight
	passedSlots                chan struct{} // the same, for tokens in allowed alone
	// unknownReviews paces the reviews of tokens not allowed before.
	unknownReviews *rate.Limiter
}

// passed is a token allowed when reviewed: its verdict holds until
// expires, then it is only known, for passedTTL.
type passed struct {
	verdict verdict
	expires time.Time
}

// New guards path with reviews; log receives the review errors.
func New(reviews Reviewer, path string, log logrus.FieldLogger) *Guard {
	return newGuard(reviews, path, log, time.Now)
}

func newGuard(reviews Reviewer, path string, log logrus.FieldLogger, now func() time.Time) *Guard {
	return &Guard{
		reviews: reviews, path: path, audiences: []string{Audience},
		log: &errorLog{log: log, now: now}, now: now,
		allowed:        cache.NewLRUExpireCacheWithClock(maxAllowed, clockFunc(now)),
		refused:        cache.NewLRUExpireCacheWithClock(maxRefused, clockFunc(now)),
		subjects:       cache.NewLRUExpireCacheWithClock(maxAllowed, clockFunc(now)),
		keys:           &signingKeys{fetch: reviews.SigningKeys, now: now},
		slots:          make(chan struct{}, maxReviewsInFlight),
		passedSlots:    make(chan struct{}, maxPassedInFlight),
		unknownReviews: rate.NewLimiter(unknownReviewsPerSecond, unknownReviewBurst),
	}
}

// verdict is what the API server said of a token.
type verdict struct {
	user          string // empty when not authenticated
	authenticated bool
	allowed       bool // the user may get the path
}

// Wrap returns next behind the guard: only a GET or HEAD whose token's
// user may get the path reaches it.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		token, ok := bearerToken(r)
		if !ok || !looksLikeJWT(token) {
			unauthorized(w)
			return
		}
		v, err := g.verdictOn(r.Context(), token)
		switch {
		case err != nil:
			g.log.report(err)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "the token cannot be checked now", http.StatusServiceUnavailable)
		case !v.authenticated:
			unauthorized(w)
		case !v.allowed:
			// The body names no user: it would tell whoever presents a
			// token (one picked up on the node's network, say) whose
			// account it is. The operator finds the user at debug level.
			g.log.log.Debugf("metrics: user %q may not get %s; answered 403", v.user, g.path)
			http.Error(w, "forbidden: this token may not get the metrics", http.StatusForbidden)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// looksLikeJWT says whether token has a JSON Web Token's form: three
// base64url parts, the first a JSON object naming its algorithm. Service
// account and OIDC tokens have it; anything else is refused before the API
// server is asked about it.
func looksLikeJWT(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.ContainsFunc(p, func(r rune) bool {
			return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}) {
			return false
		}
	}
	header, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return false
	}
	var h struct {
		Alg string `json:"alg"`
	}
	return json.Unmarshal(header, &h) == nil && h.Alg != ""
}

// bearerToken is the request's "Authorization: Bearer" token.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	return token, strings.EqualFold(scheme, "Bearer") && token != "" && len(token) <= maxTokenBytes
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="rdma-cdi metrics"`)
	http.Error(w, "unauthorized: want a bearer token the API server accepts", http.StatusUnauthorized)
}

// verdictOn answers from the caches, else from the API server within a
// bounded number of reviews at once. Errors are not cached: the next
// scrape asks again.
func (g *Guard) verdictOn(ctx context.Context, token string) (verdict, error) {
	key := sha256.Sum256([]byte(token))
	v, fresh, known := g.cached(key)
	if fresh {
		return v, nil
	}
	if !known {
		known = g.renewedForAllowedUser(ctx, token)
	}
	if !known && !g.unknownReviews.AllowN(g.now(), 1) {
		return verdict{}, errBusy
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	release, err := g.slot(ctx, known)
	if err != nil {
		return verdict{}, err
	}
	defer release()
	v, err = g.review(ctx, token)
	if err != nil {
		return verdict{}, err
	}
	if v.allowed {
		g.allowed.Add(key, passed{verdict: v, expires: g.now().Add(allowedTTL)}, passedTTL)
		g.subjects.Add(v.user, struct{}{}, passedTTL)
	} else {
		g.allowed.Remove(key) // revoked: no longer known
		g.refused.Add(key, v, refusedTTL)
		if v.authenticated {
			g.subjects.Remove(v.user)
		}
	}
	return v, nil
}

// renewedForAllowedUser says whether token is a renewal of a token allowed
// before: signed by the issuer, valid now, for a user allowed before.
func (g *Guard) renewedForAllowedUser(ctx context.Context, token string) bool {
	sub, err := g.verifiedSubject(ctx, token, func(sub string) bool {
		_, ok := g.subjects.Get(sub)
		return ok
	})
	if err != nil {
		g.log.reportKeys(err)
	}
	return sub != ""
}

// cached is the token's verdict if one holds (fresh), and whether it was
// allowed before (known), its verdict expired.
func (g *Guard) cached(key [sha256.Size]byte) (v verdict, fresh, known bool) {
	if e, ok := g.allowed.Get(key); ok {
		p := e.(passed)
		if g.now().Before(p.expires) {
			return p.verdict, true, true
		}
		return verdict{}, false, true
	}
	if e, ok := g.refused.Get(key); ok {
		return e.(verdict), true, false
	}
	return verdict{}, false, false
}

// slot takes a review slot: any free one, else, for a known token, the
// one kept for known tokens, waited for until ctx ends. Unknown tokens
// never wait: beyond the bound they get 503 at once.
func (g *Guard) slot(ctx context.Context, known bool) (release func(), err error) {
	select {
	case g.slots <- struct{}{}:
		return func() { <-g.slots }, nil
	default:
	}
	if !known {
		return nil, errBusy
	}
	select {
	case g.passedSlots <- struct{}{}:
		return func() { <-g.passedSlots }, nil
	case <-ctx.Done():
		return nil, errBusy
	}
}

// review asks the API server who the token is, for our audiences, then
// whether that user may get the path.
func (g *Guard) review(ctx context.Context, token string) (verdict, error) {
	tr, err := g.reviews.ReviewToken(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{
		Token: token, Audiences: g.audiences,
	}})
	if err != nil {
		return verdict{}, fmt.Errorf("TokenReview: %w", err)
	}
	// An authenticator that ignores audiences (a static or webhook token
	// authenticator, say) answers none: such a token may be the API
	// server's, and is refused, as the API server's own webhook
	// authenticator does.
	if !tr.Status.Authenticated || !slices.ContainsFunc(tr.Status.Audiences, func(a string) bool { return slices.Contains(g.audiences, a) }) {
		return verdict{}, nil
	}
	user := tr.Status.User
	sar, err := g.reviews.ReviewAccess(ctx, g.accessReview(user))
	if err != nil {
		return verdict{}, fmt.Errorf("SubjectAccessReview of user %q: %w", user.Username, err)
	}
	return verdict{user: user.Username, authenticated: true, allowed: sar.Status.Allowed}, nil
}

// accessReview asks whether user, as the TokenReview named it (groups,
// uid and extra included, which RBAC and webhooks may match), may get the
// path.
func (g *Guard) accessReview(user authnv1.UserInfo) *authzv1.SubjectAccessReview {
	var extra map[string]authzv1.ExtraValue
	if user.Extra != nil {
		extra = make(map[string]authzv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			extra[k] = authzv1.ExtraValue(v)
		}
	}
	return &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user.Username, Groups: user.Groups, UID: user.UID, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: g.path, Verb: "get"},
	}}
}

// errorLog logs review errors at error level at most once per
// errorLogEvery, the others at debug level.
type errorLog struct {
	log logrus.FieldLogger
	now func() time.Time

	mu   sync.Mutex
	next time.Time // the next error logged at error level
}

func (l *errorLog) report(err error) {
	if l.loud() {
		l.log.Errorf("metrics: %v; /metrics answers 503 until the reviews pass (more such errors in the next %v are logged at debug level)", err, errorLogEvery)
		return
	}
	l.log.Debugf("metrics: %v; answered 503", err)
}

// reportKeys logs a failure to read the signing keys, on the same budget:
// requests go on, but a renewed scrape token waits with unknown ones.
func (l *errorLog) reportKeys(err error) {
	if l.loud() {
		l.log.Warnf("metrics: %v; a scraper's renewed token is reviewed as an unknown one (paced) until the keys are read", err)
		return
	}
	l.log.Debugf("metrics: %v", err)
}

// loud says whether the next error is logged at a loud level: the first of
// each errorLogEvery.
func (l *errorLog) loud() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Before(l.next) {
		return false
	}
	l.next = now.Add(errorLogEvery)
	return true
}

// clockFunc is a cache.Clock, so that tests move the caches' time.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }
