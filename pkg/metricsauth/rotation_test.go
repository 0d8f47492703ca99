package metricsauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/sirupsen/logrus"
)

// issuer signs service account tokens as the API server does, with a key
// it publishes in its JSON Web Key Set.
type issuer struct {
	key *ecdsa.PrivateKey
	kid string
}

func newIssuer(t *testing.T, kid string) issuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return issuer{key: key, kid: kid}
}

// jwks is the set publishing the issuers' public keys.
func jwks(t *testing.T, issuers ...issuer) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, i := range issuers {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: i.key.Public(), KeyID: i.kid, Algorithm: string(jose.ES256), Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// token is a service account token of sub for aud, issued at iat, valid
// until exp.
func (i issuer) token(t *testing.T, sub string, aud []string, iat, exp time.Time) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: i.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), i.kid))
	if err != nil {
		t.Fatal(err)
	}
	claims, err := json.Marshal(map[string]any{"iss": "https://kubernetes.default.svc", "sub": sub, "aud": aud,
		"iat": iat.Unix(), "nbf": iat.Unix(), "exp": exp.Unix()})
	if err != nil {
		t.Fatal(err)
	}
	sig, err := signer.Sign(claims)
	if err != nil {
		t.Fatal(err)
	}
	out, err := sig.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// floodSlots holds every review slot with unknown tokens and spends the
// pacing budget of unknown tokens, as a flood does; the returned func ends
// the flood.
func floodSlots(t *testing.T, api *fakeAPI, a agent) (end func()) {
	t.Helper()
	api.hold = make(chan struct{})
	var wg sync.WaitGroup
	for i := range maxReviewsInFlight {
		wg.Go(func() { a.get(t, "/metrics", "Bearer "+jwt(fmt.Sprintf("held-%d", i))) })
	}
	tokens, _ := api.reviews()
	waitReviews(t, api, tokens+maxReviewsInFlight)
	for i := range unknownReviewBurst {
		a.get(t, "/metrics", "Bearer "+jwt(fmt.Sprintf("paced-%d", i)))
	}
	return func() { close(api.hold); wg.Wait() }
}

// allowedScraper is an agent asking api, whose issuer signs tokens, and
// Prometheus' first token from it, allowed.
func allowedScraper(t *testing.T, kid string) (api *fakeAPI, cluster issuer, a agent, first string) {
	t.Helper()
	api = newFakeAPI()
	cluster = newIssuer(t, kid)
	api.jwks = jwks(t, cluster)
	a = newAgent(t, api)
	first = cluster.token(t, prometheusUser.Username, []string{Audience}, *a.now, a.now.Add(time.Hour))
	api.users[first] = prometheusUser
	code, body := a.get(t, "/metrics", "Bearer "+first)
	wantStatus(t, "Prometheus' first token", code, body, http.StatusOK)
	return api, cluster, a, first
}

// A scraper's token renewed by the kubelet during a flood of unknown
// tokens is served: signed by the cluster's issuer, valid, for Audience,
// its user allowed before, it waits in the lane of known tokens and is
// reviewed (the review still decides). Tokens that only look alike do not
// get that lane: another key's, another user's, an expired one, one for
// another audience.
func TestFloodDoesNotStarveARenewedToken(t *testing.T) {
	api, cluster, a, first := allowedScraper(t, "cluster-key")
	now := *a.now
	hour := time.Hour

	// Prometheus scrapes on (its verdict is reviewed again each
	// allowedTTL); fifty minutes on, the kubelet renews the token while a
	// flood is running.
	for *a.now = now.Add(allowedTTL); a.now.Before(now.Add(50 * time.Minute)); *a.now = a.now.Add(allowedTTL) {
		if code, body := a.get(t, "/metrics", "Bearer "+first); code != http.StatusOK {
			t.Fatalf("Prometheus at %v: %d %s", a.now.Sub(now), code, body)
		}
	}
	at := *a.now
	end := floodSlots(t, api, a)
	defer end()
	renewed := cluster.token(t, prometheusUser.Username, []string{Audience}, at, at.Add(hour))
	api.users[renewed] = prometheusUser
	before, _ := api.reviews()
	code, body := a.get(t, "/metrics", "Bearer "+renewed)
	wantStatus(t, "Prometheus' renewed token, in the flood", code, body, http.StatusOK)
	if after, _ := api.reviews(); after != before+1 {
		t.Errorf("%d TokenReviews for the renewed token, want 1: the review still decides", after-before)
	}

	forger := newIssuer(t, "cluster-key") // the cluster's key id, another key
	for what, token := range map[string]string{
		"the user's token signed with another key": forger.token(t, prometheusUser.Username, []string{Audience}, at, at.Add(hour)),
		"another user's token":                     cluster.token(t, "system:serviceaccount:tenant:default", []string{Audience}, at, at.Add(hour)),
		"the user's expired token":                 cluster.token(t, prometheusUser.Username, []string{Audience}, at.Add(-2*hour), at.Add(-hour)),
		"the user's token for the API server":      cluster.token(t, prometheusUser.Username, []string{apiAudience}, at, at.Add(hour)),
	} {
		api.users[token] = prometheusUser
		code, body := a.get(t, "/metrics", "Bearer "+token)
		wantStatus(t, what+", in the flood", code, body, http.StatusServiceUnavailable)
	}
}

// A user refused after being allowed (its binding removed) loses the lane:
// its next renewed token waits with unknown ones.
func TestRefusedUserLosesTheRenewalLane(t *testing.T) {
	api, cluster, a, first := allowedScraper(t, "k")
	now := *a.now
	api.allowed[prometheusUser.Username] = false
	*a.now = now.Add(allowedTTL + time.Second)
	code, body := a.get(t, "/metrics", "Bearer "+first)
	wantStatus(t, "Prometheus, its binding removed", code, body, http.StatusForbidden)

	end := floodSlots(t, api, a)
	defer end()
	renewed := cluster.token(t, prometheusUser.Username, []string{Audience}, *a.now, a.now.Add(time.Hour))
	api.users[renewed] = prometheusUser
	code, body = a.get(t, "/metrics", "Bearer "+renewed)
	wantStatus(t, "a renewed token of a user refused since, in the flood", code, body, http.StatusServiceUnavailable)
}

// The signing keys are read only for a token that claims a user allowed
// before and names a key not in the set, and then at most once per
// keysRefreshEvery: tokens naming unknown keys cost the API server nothing
// more. A signing key added since is found after that.
// A failure to read them is logged once and costs only the lane.
func TestSigningKeysAreReadAtMostOncePerPeriod(t *testing.T) {
	api, old, a, _ := allowedScraper(t, "old")
	now := *a.now
	strangers := func(sub string) {
		for i := range 10 {
			stranger := newIssuer(t, fmt.Sprintf("stranger-%d", i))
			a.get(t, "/metrics", "Bearer "+stranger.token(t, sub, []string{Audience}, now, now.Add(time.Hour)))
		}
	}
	strangers("x")
	if api.keyFetches != 0 {
		t.Errorf("%d reads of the signing keys for tokens of a user never allowed, want none", api.keyFetches)
	}
	strangers(prometheusUser.Username)
	if api.keyFetches != 1 {
		t.Errorf("%d reads of the signing keys for 10 tokens of unknown keys in a minute, want 1", api.keyFetches)
	}

	added := newIssuer(t, "added")
	api.jwks = jwks(t, old, added)
	*a.now = now.Add(keysRefreshEvery)
	end := floodSlots(t, api, a)
	renewed := added.token(t, prometheusUser.Username, []string{Audience}, *a.now, a.now.Add(time.Hour))
	api.users[renewed] = prometheusUser
	code, body := a.get(t, "/metrics", "Bearer "+renewed)
	wantStatus(t, "a token of a signing key added since, in the flood", code, body, http.StatusOK)
	end()
	if api.keyFetches != 2 {
		t.Errorf("%d reads of the signing keys, want 2", api.keyFetches)
	}

	api.keysErr = errors.New("forbidden")
	*a.now = a.now.Add(keysRefreshEvery)
	a.log.Reset()
	unknownKey := newIssuer(t, "rotated-again")
	a.get(t, "/metrics", "Bearer "+unknownKey.token(t, prometheusUser.Username, []string{Audience}, *a.now, a.now.Add(time.Hour)))
	warned := 0
	for _, e := range a.log.AllEntries() {
		if e.Level == logrus.WarnLevel {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("%d warnings for keys that cannot be read, want 1:\n%v", warned, a.log.AllEntries())
	}
}
