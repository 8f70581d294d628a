package imagepolicy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"sless.dev/sless/rules"
)

// ErrRefusedAddress is a dial resolution refused: a host outside the policy's registries
// (a redirect's, a token service's) that resolves to an address rules.PublicAddress rejects.
var ErrRefusedAddress = errors.New("refused: a loopback, private, link-local or metadata address")

// Transport is what tag resolution speaks HTTP through. The platform's and the allowed
// registries' own host:port are dialed whatever they resolve to (an in-cluster registry is
// on a private address); every other dial — a redirect, a token service, a blob host — must
// reach a public address, checked on the address actually dialed after resolution (so DNS
// rebinding does not help). No HTTP(S)_PROXY: a proxy would dial for us, unchecked.
func (p Policy) Transport() http.RoundTripper {
	trusted := p.trustedHosts()
	direct := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	checked := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: publicOnly}
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if trusted[strings.ToLower(addr)] {
				return direct.DialContext(ctx, network, addr)
			}
			return checked.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// publicOnly is a net.Dialer Control: it runs for each address dialed, after resolution.
func publicOnly(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !rules.PublicAddress(ap.Addr()) {
		return ErrRefusedAddress
	}
	return nil
}

// Describe says why resolving ref failed, in fixed words: the registry's host, its HTTP
// status, the kind of network failure. Never the error's text, which may carry what the
// registry (or whatever answered in its place) sent.
func Describe(err error, ref name.Reference) string {
	host := ref.Context().RegistryStr()
	var (
		te   *transport.Error
		dns  *net.DNSError
		op   *net.OpError
		cert *tls.CertificateVerificationError
		rec  tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, ErrRefusedAddress):
		return fmt.Sprintf("refused to connect: registry %s, or a redirect or token service it named, leads to a loopback, private, link-local or metadata address; only the hosts of the platform registry and %s are dialed there", host, FlagAllowedRegistries)
	case errors.As(err, &te):
		return fmt.Sprintf("registry %s answered %d for %s:%s", host, te.StatusCode, ref.Context().RepositoryStr(), ref.Identifier())
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("registry %s did not answer in time", host)
	case errors.As(err, &dns):
		return fmt.Sprintf("the name of registry %s does not resolve", host)
	case errors.As(err, &cert), errors.As(err, &rec):
		return fmt.Sprintf("no TLS connection to registry %s (its certificate, or plain HTTP: see --kaniko-insecure-registry)", host)
	case errors.As(err, &op):
		return fmt.Sprintf("cannot connect to registry %s", host)
	}
	return fmt.Sprintf("registry %s gave no usable answer", host)
}
