package nomad

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/nomad/api"
)

// KeepAliveConns is how many idle connections to the Nomad address the sidecar's client
// keeps: at least the pins and stats reads a round has in flight, so concurrent calls reuse
// their connections instead of opening (and for TLS, handshaking) a new one each time. The
// api package's default keeps GOMAXPROCS+1, two or three on a small machine.
const KeepAliveConns = 64

// HTTPClient is the HTTP client the sidecar talks to Nomad with: one shared keep-alive pool
// sized for concurrent pins (KeepAliveConns), HTTP/1.1 and TLS 1.2+ as the api package's
// default, and the TLS settings of tlsCfg (nil: none).
func HTTPClient(tlsCfg *api.TLSConfig) (*http.Client, error) {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          KeepAliveConns,
		MaxIdleConnsPerHost:   KeepAliveConns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		// Nomad's own client stays on HTTP/1 (exec and websockets); so does this one.
		ForceAttemptHTTP2: false,
	}
	hc := &http.Client{Transport: tr}
	if tlsCfg != nil {
		if err := api.ConfigureTLS(hc, tlsCfg); err != nil {
			return nil, fmt.Errorf("nomad client TLS: %w", err)
		}
	}
	return hc, nil
}
