package explainlink_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/sidecar/runtime/explainlink"
)

func at(s string) func() time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return func() time.Time { return t }
}

var secret = []byte("0123456789abcdef0123456789abcdef")

// The link written for a job is one string all day (no job churn), and changes at midnight.
func TestExpiryRoundedToDays(t *testing.T) {
	tests := []struct {
		now, want string
	}{
		// 31 days after 10 March is 10 April; rounded up to the next midnight.
		{"2026-03-10T00:00:01Z", "2026-04-11T00:00:00Z"},
		{"2026-03-10T15:04:05Z", "2026-04-11T00:00:00Z"},
		{"2026-03-10T23:59:59Z", "2026-04-11T00:00:00Z"},
		{"2026-03-11T00:00:01Z", "2026-04-12T00:00:00Z"},
		{"2026-03-10T00:00:00Z", "2026-04-10T00:00:00Z"}, // exactly midnight: ttl ahead is a boundary
	}
	for _, tt := range tests {
		s, err := explainlink.New(secret, 31*24*time.Hour, at(tt.now))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Expiry().Format(time.RFC3339); got != tt.want {
			t.Errorf("now %s: expiry %s, want %s", tt.now, got, tt.want)
		}
	}
	a, _ := explainlink.New(secret, 0, at("2026-03-10T08:00:00Z"))
	b, _ := explainlink.New(secret, 0, at("2026-03-10T20:00:00Z"))
	c, _ := explainlink.New(secret, 0, at("2026-03-11T08:00:00Z"))
	if a.Query("default", "j") != b.Query("default", "j") {
		t.Error("two links written the same day differ")
	}
	if a.Query("default", "j") == c.Query("default", "j") {
		t.Error("links written on different days are the same")
	}
}

func TestVerify(t *testing.T) {
	s, _ := explainlink.New(secret, 0, at("2026-03-10T08:00:00Z"))
	later, _ := explainlink.New(secret, 0, at("2026-04-11T00:00:00Z"))
	q := s.Query("ns", "job")
	exp, sig, _ := strings.Cut(q, "&")
	exp, sig = strings.TrimPrefix(exp, "exp="), strings.TrimPrefix(sig, "sig=")
	tests := []struct {
		name            string
		by              *explainlink.Signer
		ns, job, e, sig string
		want            string
	}{
		{"valid", s, "ns", "job", exp, sig, ""},
		{"other job", s, "ns", "job2", exp, sig, "does not match"},
		{"ns/job boundary moved", s, "ns/j", "ob", exp, sig, "does not match"},
		{"later expiry", s, "ns", "job", exp + "0", sig, "does not match"},
		{"not a number", s, "ns", "job", "soon", sig, "exp = \"soon\""},
		{"not base64", s, "ns", "job", exp, "***", "does not match"},
		{"expired at its midnight", later, "ns", "job", exp, sig, "has expired (on 2026-04-10T00:00:00Z)"},
	}
	for _, tt := range tests {
		err := tt.by.Verify(tt.ns, tt.job, tt.e, tt.sig)
		if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Verify = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestSecretPersists(t *testing.T) {
	dir := t.TempDir()
	a, err := explainlink.LoadOrCreateSecret(dir)
	if err != nil || len(a) != 32 {
		t.Fatalf("first = %x, %v", a, err)
	}
	b, err := explainlink.LoadOrCreateSecret(dir)
	if err != nil || string(a) != string(b) {
		t.Fatalf("second = %x, %v; want the first one back", b, err)
	}
	fi, err := os.Stat(filepath.Join(dir, explainlink.SecretFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("secret file mode %v, %v; want 0600", fi.Mode(), err)
	}
	if err := os.WriteFile(filepath.Join(dir, explainlink.SecretFile), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := explainlink.LoadOrCreateSecret(dir); err == nil || !strings.Contains(err.Error(), "expected 32 hex-encoded") {
		t.Errorf("a damaged secret = %v, want an error", err)
	}
	if _, err := explainlink.New([]byte("short"), 0, nil); err == nil || !strings.Contains(err.Error(), "explain_link_secret: 5 bytes, expected at least 32") {
		t.Errorf("short secret = %v", err)
	}
}
