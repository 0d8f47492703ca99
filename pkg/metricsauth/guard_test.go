package metricsauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"github.com/rdma-cdi/rdma-cdi/pkg/specgen"
)

// apiAudience is the fake API server's own audience, which a TokenReview
// without audiences asks for.
const apiAudience = "https://kubernetes.default.svc.cluster.local"

// fakeAPI answers reviews as an API server would: tokens name users, and
// some users may get /metrics. It records every review it is asked.
type fakeAPI struct {
	users     map[string]authnv1.UserInfo // by token
	audiences map[string][]string         // by token, what it was issued for: Audience where absent
	unaware   bool                        // the authenticator ignores audiences, and answers none
	allowed   map[string]bool             // by user name
	err       error                       // every review fails with it
	hold      chan struct{}               // when set, reviews of unknown tokens wait for it to close
	jwks      []byte                      // the issuer's signing keys, as /openid/v1/jwks serves them
	keysErr   error                       // reading the keys fails with it

	mu            sync.Mutex
	tokenReviews  []*authnv1.TokenReview
	accessReviews []*authzv1.SubjectAccessReview
	keyFetches    int
}

func (f *fakeAPI) SigningKeys(context.Context) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keyFetches++
	if f.keysErr != nil {
		return nil, f.keysErr
	}
	if f.jwks == nil {
		return []byte(`{"keys":[]}`), nil
	}
	return f.jwks, nil
}

func (f *fakeAPI) ReviewToken(ctx context.Context, r *authnv1.TokenReview) (*authnv1.TokenReview, error) {
	f.mu.Lock()
	f.tokenReviews = append(f.tokenReviews, r)
	f.mu.Unlock()
	user, ok := f.users[r.Spec.Token]
	if f.hold != nil && !ok {
		<-f.hold
	}
	if f.err != nil {
		return nil, f.err
	}
	if f.unaware {
		return &authnv1.TokenReview{Status: authnv1.TokenReviewStatus{Authenticated: ok, User: user}}, nil
	}
	// As the API server: the token authenticates for the audiences asked
	// (its own where none) that it was issued for, and says which.
	want, issued := r.Spec.Audiences, f.audiences[r.Spec.Token]
	if len(want) == 0 {
		want = []string{apiAudience}
	}
	if issued == nil {
		issued = []string{Audience}
	}
	var auds []string
	for _, a := range want {
		if slices.Contains(issued, a) {
			auds = append(auds, a)
		}
	}
	if !ok || len(auds) == 0 {
		return &authnv1.TokenReview{Status: authnv1.TokenReviewStatus{Error: "invalid bearer token"}}, nil
	}
	return &authnv1.TokenReview{Status: authnv1.TokenReviewStatus{Authenticated: true, User: user, Audiences: auds}}, nil
}

func (f *fakeAPI) ReviewAccess(_ context.Context, r *authzv1.SubjectAccessReview) (*authzv1.SubjectAccessReview, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.accessReviews = append(f.accessReviews, r)
	return &authzv1.SubjectAccessReview{Status: authzv1.SubjectAccessReviewStatus{Allowed: f.allowed[r.Spec.User]}}, nil
}

// reviews counts the reviews asked so far.
func (f *fakeAPI) reviews() (tokens, access int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tokenReviews), len(f.accessReviews)
}

// jwt is a token of a JSON Web Token's form for name (the guard checks the
// form; the fake API server knows tokens by their whole text).
func jwt(name string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","kid":"test"}`)) + "." + enc([]byte(`{"sub":"`+name+`"}`)) + "." + enc([]byte("signature of "+name))
}

var (
	prometheusToken = jwt("prometheus")
	tenantToken     = jwt("tenant")
)

var prometheusUser = authnv1.UserInfo{
	Username: "system:serviceaccount:monitoring:prometheus", UID: "0b9e",
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:monitoring", "system:authenticated"},
	Extra:  map[string]authnv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prometheus-0"}},
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{
		users: map[string]authnv1.UserInfo{
			prometheusToken: prometheusUser,
			tenantToken:     {Username: "system:serviceaccount:tenant:default"},
		},
		allowed: map[string]bool{prometheusUser.Username: true},
	}
}

// agent is an agent's endpoint, ready, with /metrics behind a guard
// asking api; now moves the guard's clock.
type agent struct {
	url string
	log *logtest.Hook
	now *time.Time
}

func newAgent(t *testing.T, api Reviewer) agent {
	t.Helper()
	e := metrics.New(metrics.Options{Mode: "watch", Version: "test"})
	e.Generation(specgen.Outcome{}, config.Default(), nil)
	logger, hook := logtest.NewNullLogger()
	logger.SetLevel(logrus.DebugLevel)
	now := time.Unix(1_800_000_000, 0)
	g := newGuard(api, metrics.Path, logger, func() time.Time { return now })
	srv := httptest.NewServer(e.GuardedHandler(g.Wrap))
	t.Cleanup(srv.Close)
	return agent{url: srv.URL, log: hook, now: &now}
}

// get asks path with "Authorization: auth" (none when empty).
func (a agent) get(t *testing.T, path, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, a.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func wantStatus(t *testing.T, what string, code int, body string, want int) {
	t.Helper()
	if code != want {
		t.Errorf("%s: %d %.300q, want %d", what, code, body, want)
	}
	if want != http.StatusOK && strings.Contains(body, "rdma_cdi_") {
		t.Errorf("%s: a refused request got metrics: %.300q", what, body)
	}
}

func TestNoTokenIsUnauthorized(t *testing.T) {
	api := newFakeAPI()
	a := newAgent(t, api)
	for _, auth := range []string{"", "Bearer", "Bearer   ", "Basic cHJvbTpwYXNz", prometheusToken,
		"Bearer " + strings.Repeat("x", maxTokenBytes+1)} {
		code, body := a.get(t, "/metrics", auth)
		wantStatus(t, fmt.Sprintf("Authorization %.20q", auth), code, body, http.StatusUnauthorized)
	}
	if tokens, _ := api.reviews(); tokens != 0 {
		t.Errorf("%d TokenReviews for requests without a bearer token, want none", tokens)
	}
}

func TestBadTokenIsUnauthorized(t *testing.T) {
	api := newFakeAPI()
	code, body := newAgent(t, api).get(t, "/metrics", "Bearer "+jwt("forged"))
	wantStatus(t, "a token the API server does not know", code, body, http.StatusUnauthorized)
	if tokens, access := api.reviews(); tokens != 1 || access != 0 {
		t.Errorf("%d TokenReviews and %d SubjectAccessReviews, want 1 and 0", tokens, access)
	}
}

func TestUserNotAllowedIsForbidden(t *testing.T) {
	code, body := newAgent(t, newFakeAPI()).get(t, "/metrics", "Bearer "+tenantToken)
	wantStatus(t, "a user without get on /metrics", code, body, http.StatusForbidden)
}

// A 403 says nothing of whom the token names: the same body for
// every user.
func TestForbiddenNamesNoUser(t *testing.T) {
	api := newFakeAPI()
	api.users[jwt("other")] = authnv1.UserInfo{Username: "alice@corp.example", Groups: []string{"sre"}}
	a := newAgent(t, api)
	var bodies []string
	for _, token := range []string{tenantToken, jwt("other")} {
		code, body := a.get(t, "/metrics", "Bearer "+token)
		wantStatus(t, token, code, body, http.StatusForbidden)
		for _, leak := range []string{"tenant", "serviceaccount", "alice", "sre"} {
			if strings.Contains(body, leak) {
				t.Errorf("403 for %s names %q: %q", token, leak, body)
			}
		}
		bodies = append(bodies, body)
	}
	if bodies[0] != bodies[1] {
		t.Errorf("403 bodies differ by user: %q", bodies)
	}
}

// The token is reviewed for Audience alone: a token the API server would
// take for itself (a pod's default token, or one replayed from a scrape)
// is refused, as is any token of an authenticator that names no audience.
func TestTokenMustBeForTheMetricsAudience(t *testing.T) {
	api := newFakeAPI()
	api.users[jwt("api")] = prometheusUser
	api.audiences = map[string][]string{jwt("api"): {apiAudience}, jwt("both"): {apiAudience, Audience}}
	api.users[jwt("both")] = prometheusUser
	a := newAgent(t, api)
	code, body := a.get(t, "/metrics", "Bearer "+jwt("api"))
	wantStatus(t, "Prometheus' user with a token for the API server", code, body, http.StatusUnauthorized)
	code, body = a.get(t, "/metrics", "Bearer "+jwt("both"))
	wantStatus(t, "Prometheus' user with a token for the API server and the metrics", code, body, http.StatusOK)
	code, body = a.get(t, "/metrics", "Bearer "+prometheusToken)
	wantStatus(t, "Prometheus' user with a token for the metrics", code, body, http.StatusOK)
	for _, tr := range api.tokenReviews {
		if !slices.Equal(tr.Spec.Audiences, []string{Audience}) {
			t.Errorf("TokenReview for audiences %q, want [%s]", tr.Spec.Audiences, Audience)
		}
	}

	unaware := newFakeAPI()
	unaware.unaware = true
	code, body = newAgent(t, unaware).get(t, "/metrics", "Bearer "+prometheusToken)
	wantStatus(t, "an authenticator that names no audience", code, body, http.StatusUnauthorized)
}

func TestAllowedUserGetsTheMetrics(t *testing.T) {
	code, body := newAgent(t, newFakeAPI()).get(t, "/metrics", "bearer "+prometheusToken)
	wantStatus(t, "Prometheus", code, body, http.StatusOK)
	if !strings.Contains(body, `rdma_cdi_agent_info{mode="watch",version="test"} 1`) {
		t.Errorf("the scrape lacks the agent's info:\n%s", body)
	}
}

// The kubelet's probes carry no token.
func TestProbesNeedNoToken(t *testing.T) {
	api := newFakeAPI()
	a := newAgent(t, api)
	for _, probe := range []string{"/healthz", "/readyz"} {
		code, body := a.get(t, probe, "")
		wantStatus(t, probe, code, body, http.StatusOK)
	}
	if tokens, _ := api.reviews(); tokens != 0 {
		t.Errorf("%d TokenReviews for probes, want none", tokens)
	}
}

func TestMethodsOtherThanGetAreRefused(t *testing.T) {
	a := newAgent(t, newFakeAPI())
	resp, err := http.Post(a.url+"/metrics", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want 405", resp.StatusCode)
	}
}

// A Prometheus scraping every 15 s costs one pair of reviews per TTL, a
// refused token one review per TTL.
func TestVerdictsAreCached(t *testing.T) {
	api := newFakeAPI()
	a := newAgent(t, api)
	for range 4 {
		code, body := a.get(t, "/metrics", "Bearer "+prometheusToken)
		wantStatus(t, "Prometheus", code, body, http.StatusOK)
		code, body = a.get(t, "/metrics", "Bearer "+jwt("forged"))
		wantStatus(t, "a forged token", code, body, http.StatusUnauthorized)
		code, body = a.get(t, "/metrics", "Bearer "+tenantToken)
		wantStatus(t, "a tenant", code, body, http.StatusForbidden)
		*a.now = a.now.Add(5 * time.Second)
	}
	if tokens, access := api.reviews(); tokens != 3 || access != 2 {
		t.Fatalf("%d TokenReviews and %d SubjectAccessReviews within the TTLs, want 3 and 2", tokens, access)
	}
	*a.now = a.now.Add(allowedTTL)
	a.get(t, "/metrics", "Bearer "+prometheusToken)
	if tokens, access := api.reviews(); tokens != 4 || access != 3 {
		t.Errorf("%d TokenReviews and %d SubjectAccessReviews after the TTL, want 4 and 3", tokens, access)
	}
}

// A flood of bad tokens fills the refused cache alone: Prometheus' verdict
// stays cached.
func TestBadTokensDoNotEvictAllowedOnes(t *testing.T) {
	api := newFakeAPI()
	g := newGuard(api, metrics.Path, logrus.New(), time.Now)
	g.unknownReviews = rate.NewLimiter(rate.Inf, 1) // every forged token reviewed, to fill the cache
	h := g.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	ask := func(token string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	ask(prometheusToken)
	for i := range 2 * maxRefused {
		if code := ask(jwt(fmt.Sprintf("forged-%d", i))); code != http.StatusUnauthorized {
			t.Fatalf("forged token %d: %d", i, code)
		}
	}
	if n := len(g.refused.Keys()); n > maxRefused {
		t.Errorf("%d refused verdicts cached, want at most %d", n, maxRefused)
	}
	before, _ := api.reviews()
	if code := ask(prometheusToken); code != http.StatusOK {
		t.Fatalf("Prometheus after the flood: %d", code)
	}
	if after, _ := api.reviews(); after != before {
		t.Error("the flood pushed Prometheus' verdict out of the cache")
	}
}

// An API server that fails never lets a request through, is asked again
// at the next request, and is logged loudly once a minute.
func TestReviewErrorIsNeverOK(t *testing.T) {
	api := newFakeAPI()
	api.err = errors.New("connection refused")
	a := newAgent(t, api)
	for range 3 {
		code, body := a.get(t, "/metrics", "Bearer "+prometheusToken)
		wantStatus(t, "API server down", code, body, http.StatusServiceUnavailable)
	}
	if tokens, _ := api.reviews(); tokens != 3 {
		t.Errorf("%d TokenReviews, want 3: an error must not be cached", tokens)
	}
	if levels := logLevels(a.log); !reflect.DeepEqual(levels, []logrus.Level{logrus.ErrorLevel, logrus.DebugLevel, logrus.DebugLevel}) {
		t.Errorf("log levels %v, want one error then debug", levels)
	}
	if msg := a.log.Entries[0].Message; !strings.Contains(msg, "connection refused") {
		t.Errorf("the error log does not say why: %q", msg)
	}
	*a.now = a.now.Add(errorLogEvery)
	api.err = nil
	code, body := a.get(t, "/metrics", "Bearer "+prometheusToken)
	wantStatus(t, "API server back", code, body, http.StatusOK)
}

func logLevels(hook *logtest.Hook) []logrus.Level {
	var out []logrus.Level
	for _, e := range hook.AllEntries() {
		out = append(out, e.Level)
	}
	return out
}

// Requests that miss the caches beyond maxReviewsInFlight get 503 at once,
// without a review.
func TestReviewsInFlightAreBounded(t *testing.T) {
	api := newFakeAPI()
	api.hold = make(chan struct{})
	a := newAgent(t, api)
	var wg sync.WaitGroup
	for i := range maxReviewsInFlight {
		wg.Go(func() { a.get(t, "/metrics", "Bearer "+jwt(fmt.Sprintf("held-%d", i))) })
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if tokens, _ := api.reviews(); tokens == maxReviewsInFlight {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held reviews did not start")
		}
	}
	code, body := a.get(t, "/metrics", "Bearer "+jwt("one-more"))
	wantStatus(t, "a review beyond the bound", code, body, http.StatusServiceUnavailable)
	if tokens, _ := api.reviews(); tokens != maxReviewsInFlight {
		t.Errorf("%d TokenReviews, want %d", tokens, maxReviewsInFlight)
	}
	close(api.hold)
	wg.Wait()
}

// waitReviews waits until n TokenReviews were asked.
func waitReviews(t *testing.T, api *fakeAPI, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if tokens, _ := api.reviews(); tokens >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d TokenReviews did not start", n)
		}
	}
}

// Unknown tokens holding every review slot do not turn away a
// Prometheus whose verdict expired: a token allowed before has a slot of
// its own. Unknown tokens, and tokens never allowed, still get 503.
func TestFloodDoesNotStarveAllowedToken(t *testing.T) {
	api := newFakeAPI()
	api.hold = make(chan struct{})
	a := newAgent(t, api)
	code, body := a.get(t, "/metrics", "Bearer "+prometheusToken)
	wantStatus(t, "Prometheus before the flood", code, body, http.StatusOK)
	var wg sync.WaitGroup
	for i := range maxReviewsInFlight {
		wg.Go(func() { a.get(t, "/metrics", "Bearer "+jwt(fmt.Sprintf("random-%d", i))) })
	}
	waitReviews(t, api, 1+maxReviewsInFlight)
	for _, ttl := range []time.Duration{allowedTTL, passedTTL - allowedTTL - time.Second} {
		*a.now = a.now.Add(ttl)
		before, _ := api.reviews()
		code, body = a.get(t, "/metrics", "Bearer "+prometheusToken)
		wantStatus(t, fmt.Sprintf("Prometheus %v on, every slot held by unknown tokens", ttl), code, body, http.StatusOK)
		if after, _ := api.reviews(); after != before+1 {
			t.Errorf("%d TokenReviews for Prometheus' expired verdict, want 1: it must be reviewed again", after-before)
		}
	}
	code, body = a.get(t, "/metrics", "Bearer "+jwt("another-random"))
	wantStatus(t, "an unknown token in the flood", code, body, http.StatusServiceUnavailable)
	code, body = a.get(t, "/metrics", "Bearer "+tenantToken)
	wantStatus(t, "a token never allowed, in the flood", code, body, http.StatusServiceUnavailable)
	close(api.hold)
	wg.Wait()
}

// The SubjectAccessReview is of the TokenReview's user, whole, and of get
// on the nonResourceURL.
func TestAccessReviewCarriesTheUser(t *testing.T) {
	api := newFakeAPI()
	newAgent(t, api).get(t, "/metrics", "Bearer "+prometheusToken)
	if len(api.tokenReviews) != 1 || api.tokenReviews[0].Spec.Token != prometheusToken || !slices.Equal(api.tokenReviews[0].Spec.Audiences, []string{Audience}) {
		t.Fatalf("TokenReviews: %+v, want one of the token, for %s alone", api.tokenReviews, Audience)
	}
	if len(api.accessReviews) != 1 {
		t.Fatalf("%d SubjectAccessReviews, want 1", len(api.accessReviews))
	}
	want := authzv1.SubjectAccessReviewSpec{
		User: prometheusUser.Username, UID: prometheusUser.UID, Groups: prometheusUser.Groups,
		Extra:                 map[string]authzv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prometheus-0"}},
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
	}
	if got := api.accessReviews[0].Spec; !reflect.DeepEqual(got, want) {
		t.Errorf("SubjectAccessReview\n got %+v\nwant %+v", got, want)
	}
}

// A token without a JSON Web Token's form (service account and OIDC
// tokens have it) is refused before the API server is asked.
func TestNonJWTTokenIsRefusedUnreviewed(t *testing.T) {
	api := newFakeAPI()
	a := newAgent(t, api)
	for _, token := range []string{"forged", "a.b", "a.b.c.d", "x.y.z", "..", jwt("x") + "%", "e30.e30.c2ln"} {
		code, body := a.get(t, "/metrics", "Bearer "+token)
		wantStatus(t, fmt.Sprintf("token %q", token), code, body, http.StatusUnauthorized)
	}
	if tokens, _ := api.reviews(); tokens != 0 {
		t.Errorf("%d TokenReviews for tokens that are no JWT, want none", tokens)
	}
}

// A client sending a new token per request is not a TokenReview per
// request: beyond the burst, unknown tokens wait for the bucket (503),
// while a token allowed before still gets through.
func TestUnknownTokenReviewsArePaced(t *testing.T) {
	api := newFakeAPI()
	a := newAgent(t, api)
	code, body := a.get(t, "/metrics", "Bearer "+prometheusToken)
	wantStatus(t, "Prometheus", code, body, http.StatusOK)
	var busy int
	for i := range 5 * unknownReviewBurst {
		if code, _ := a.get(t, "/metrics", "Bearer "+jwt(fmt.Sprintf("random-%d", i))); code == http.StatusServiceUnavailable {
			busy++
		}
	}
	// Prometheus' first review, unknown then, took one of the burst.
	if tokens, _ := api.reviews(); tokens != unknownReviewBurst {
		t.Errorf("%d TokenReviews for %d unknown tokens at one instant, want %d", tokens-1, 5*unknownReviewBurst, unknownReviewBurst-1)
	}
	if want := 5*unknownReviewBurst - (unknownReviewBurst - 1); busy != want {
		t.Errorf("%d unknown tokens answered 503, want %d", busy, want)
	}
	*a.now = a.now.Add(allowedTTL) // Prometheus' verdict is due again
	code, body = a.get(t, "/metrics", "Bearer "+prometheusToken)
	wantStatus(t, "Prometheus after the flood", code, body, http.StatusOK)
	*a.now = a.now.Add(time.Second) // the bucket refills
	code, body = a.get(t, "/metrics", "Bearer "+jwt("one-more"))
	wantStatus(t, "an unknown token a second later", code, body, http.StatusUnauthorized)
}
