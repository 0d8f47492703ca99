package metricsauth

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// A scraper's projected token is renewed by the kubelet (at 80% of its
// life, hourly in SECURITY.md's recipe), so Prometheus presents a token the
// guard has never seen about once an hour: by its hash alone it would be
// unknown, paced and denied the slot kept for known tokens, and a flood
// running at that moment would turn Prometheus away until it ends. A token
// is also known when its signature verifies with the cluster's service
// account signing keys (the API server's /openid/v1/jwks), it is unexpired
// and for Audience, and its subject is a user allowed before: only the
// issuer can mint such a token, so a flood cannot claim the lane. The
// TokenReview and SubjectAccessReview still decide; this only chooses the
// lane the review waits in.

// keysRefreshEvery bounds how often the signing keys are fetched again: at
// a token signed with a key not in the set (a rotated signing key), or
// after a failed fetch. Tokens of unknown keys cannot make the agent ask
// the API server more often.
const keysRefreshEvery = time.Minute

// signedAlgorithms are the algorithms the API server signs service
// account tokens with (RSA or ECDSA keys of its --service-account-key-file).
var signedAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512}

// signingKeys caches the issuer's key set.
type signingKeys struct {
	fetch func(context.Context) ([]byte, error)
	now   func() time.Time

	mu      sync.Mutex
	keys    jose.JSONWebKeySet
	fetched time.Time // zero before the first fetch
}

// key is the public key of id, fetching the set again when id is not in it
// and the last fetch is older than keysRefreshEvery; nil when the set has
// none (a token of another issuer), an error when the set cannot be read.
func (s *signingKeys) key(ctx context.Context, id string) (*jose.JSONWebKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.keys.Key(id); len(k) > 0 {
		return &k[0], nil
	}
	if !s.fetched.IsZero() && s.now().Sub(s.fetched) < keysRefreshEvery {
		return nil, nil
	}
	s.fetched = s.now()
	raw, err := s.fetch(ctx)
	if err != nil {
		return nil, fmt.Errorf("the service account signing keys (/openid/v1/jwks): %w", err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("the service account signing keys (/openid/v1/jwks): %w", err)
	}
	s.keys = set
	if k := s.keys.Key(id); len(k) > 0 {
		return &k[0], nil
	}
	return nil, nil
}

// tokenClaims are the claims the lane is chosen by.
type tokenClaims struct {
	Subject   string          `json:"sub"`
	Audience  json.RawMessage `json:"aud"` // a string or a list
	Expiry    int64           `json:"exp"`
	NotBefore int64           `json:"nbf"`
}

func (c tokenClaims) audiences() []string {
	var list []string
	if json.Unmarshal(c.Audience, &list) == nil {
		return list
	}
	var one string
	if json.Unmarshal(c.Audience, &one) == nil {
		return []string{one}
	}
	return nil
}

// verifiedSubject is the subject of token when it is valid now for
// Audience, candidate accepts its subject, and its signature verifies with
// the issuer's keys; "" otherwise (err says why where it is worth logging:
// the keys could not be read). The claims are looked at before the
// signature, so that only a token that would matter if genuine costs a
// verification or a read of the keys; they count once the signature over
// those same bytes verifies.
func (g *Guard) verifiedSubject(ctx context.Context, token string, candidate func(subject string) bool) (string, error) {
	sig, err := jose.ParseSignedCompact(token, signedAlgorithms)
	if err != nil || len(sig.Signatures) != 1 {
		return "", nil
	}
	var c tokenClaims
	if json.Unmarshal(sig.UnsafePayloadWithoutVerification(), &c) != nil {
		return "", nil
	}
	now := g.now().Unix()
	if c.Subject == "" || c.Expiry <= now || c.NotBefore > now || !slices.Contains(c.audiences(), Audience) || !candidate(c.Subject) {
		return "", nil
	}
	key, err := g.keys.key(ctx, sig.Signatures[0].Header.KeyID)
	if err != nil || key == nil {
		return "", err
	}
	if _, err := sig.Verify(key.Key); err != nil {
		return "", nil
	}
	return c.Subject, nil
}
