// Package explainlink signs and checks the explain links the sidecar writes into each job's
// ui block, so a person who only has the Nomad UI can open that one job's explain page
// without a bearer token, and without opening anything else of the API.
//
// A link carries ?exp=UNIX&sig=BASE64URL where sig = HMAC-SHA256(secret, "hetgpu-explain" 0
// namespace 0 job 0 exp). The expiry is rounded up to a UTC day boundary, so every link
// written on one day for a job is the same string: a job rewritten for another reason does
// not get a different link each round, and the link changes at most once a day.
package explainlink

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultTTL is how long a written link stays valid at least (it is written again whenever
// the sidecar rewrites the job's ui block, e.g. on every pin).
const DefaultTTL = 30 * 24 * time.Hour

// SecretFile is the name of the generated secret in the state directory.
const SecretFile = "explain-link.key"

// minSecret is the shortest secret accepted (bytes): HMAC-SHA256 keys shorter than the hash
// weaken it.
const minSecret = 32

// ErrExpired and ErrForged tell why a link was refused.
var (
	ErrExpired = errors.New("the explain link has expired")
	ErrForged  = errors.New("the explain link's signature does not match this job")
)

// Signer signs and verifies explain links.
type Signer struct {
	secret []byte
	ttl    time.Duration
	now    func() time.Time
}

// New makes a signer; ttl <= 0 means DefaultTTL, now nil means time.Now.
func New(secret []byte, ttl time.Duration, now func() time.Time) (*Signer, error) {
	if len(secret) < minSecret {
		return nil, fmt.Errorf("explain_link_secret: %d bytes, expected at least %d", len(secret), minSecret)
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if now == nil {
		now = time.Now
	}
	return &Signer{secret: append([]byte(nil), secret...), ttl: ttl, now: now}, nil
}

// LoadOrCreateSecret returns the secret in dir/SecretFile, creating a random one (0600) when
// there is none, so links stay valid across restarts.
func LoadOrCreateSecret(dir string) ([]byte, error) {
	path := filepath.Join(dir, SecretFile)
	b, err := os.ReadFile(path)
	if err == nil {
		s, derr := hex.DecodeString(strings.TrimSpace(string(b)))
		if derr != nil || len(s) < minSecret {
			return nil, fmt.Errorf("explain link secret %s: expected %d hex-encoded random bytes; delete it to generate a new one (old links stop working)", path, minSecret)
		}
		return s, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read explain link secret: %w", err)
	}
	s := make([]byte, minSecret)
	if _, err := rand.Read(s); err != nil {
		return nil, fmt.Errorf("generate explain link secret: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("explain link secret: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(hex.EncodeToString(s)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write explain link secret: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("write explain link secret: %w", err)
	}
	return s, nil
}

// Expiry is the expiry a link written now carries: at least ttl ahead, rounded up to the
// next UTC midnight.
func (s *Signer) Expiry() time.Time {
	t := s.now().UTC().Add(s.ttl)
	day := t.Truncate(24 * time.Hour)
	if day.Before(t) {
		day = day.Add(24 * time.Hour)
	}
	return day
}

func (s *Signer) mac(ns, job string, exp int64) []byte {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte("hetgpu-explain\x00" + ns + "\x00" + job + "\x00" + strconv.FormatInt(exp, 10)))
	return m.Sum(nil)
}

// Query returns the "exp=…&sig=…" query that opens job ns/job's explain page.
func (s *Signer) Query(ns, job string) string {
	exp := s.Expiry().Unix()
	v := url.Values{}
	v.Set("exp", strconv.FormatInt(exp, 10))
	v.Set("sig", base64.RawURLEncoding.EncodeToString(s.mac(ns, job, exp)))
	return v.Encode()
}

// Verify checks a link's exp and sig for job ns/job in constant time; the error wraps
// ErrExpired or ErrForged and says what to do.
func (s *Signer) Verify(ns, job, exp, sig string) error {
	e, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: exp = %q, expected a Unix time", ErrForged, exp)
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(ns, job, e)) {
		return fmt.Errorf("%w (the link is valid only for the job it was written into)", ErrForged)
	}
	if at := time.Unix(e, 0); !s.now().Before(at) {
		return fmt.Errorf("%w (on %s); hetgpu writes a fresh link whenever it rewrites the job; meanwhile ask the operator for a read token", ErrExpired, at.UTC().Format(time.RFC3339))
	}
	return nil
}
