package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"sless.dev/sless/history"
	"sless.dev/sless/rules"
)

// Callbacks of asynchronous invocations. The gateway takes a callback URL only on a host the
// operator allows (gateway.hostAllowed, --async-callback-hosts: the one place that rule
// lives); the dispatcher runs in the platform namespace next to the broker and the database,
// so what it connects to is narrowed further here:
//   - redirects are not followed: a 3xx is a failed delivery, so an allowed host cannot send
//     the POST on to an address of its choosing;
//   - unless Config.CallbackPrivateAddresses, a connection to a loopback, private, link-local
//     (cloud metadata), CGNAT, unspecified or multicast address is refused, checked on the
//     address actually dialed after resolution — so a name that resolves (or re-resolves,
//     DNS rebinding) into the cluster's networks is refused too. A callback URL whose host is
//     such an address literally is the operator's explicit choice and is dialed;
//   - no HTTP(S)_PROXY: callbacks connect directly;
//   - each POST is bounded by callbackTimeout, tried twice.

// callbackTimeout bounds each POST of an outcome to its callback URL (tried twice), so a
// pending callback holds up the end of Run by 2 × callbackTimeout at most.
const callbackTimeout = 10 * time.Second

var (
	// publicCallbacks dials public addresses only; directCallbacks any (an address the
	// operator allowed literally, or CallbackPrivateAddresses).
	publicCallbacks = newCallbackClient(publicAddressOnly)
	directCallbacks = newCallbackClient(nil)
)

func newCallbackClient(control func(network, address string, c syscall.RawConn) error) *http.Client {
	dialer := &net.Dialer{Timeout: callbackTimeout, KeepAlive: 30 * time.Second, Control: control}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   callbackTimeout,
			ResponseHeaderTimeout: callbackTimeout,
			MaxIdleConns:          4,
			IdleConnTimeout:       30 * time.Second,
			ForceAttemptHTTP2:     true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       callbackTimeout,
	}
}

// errNonPublicAddress: a callback host name led to an address in the platform's own networks.
var errNonPublicAddress = errors.New("refused: the callback host resolves to a loopback, private or link-local address; allow that address literally in --async-callback-hosts to reach it")

// publicAddressOnly is a net.Dialer Control: it runs for each address dialed, after
// resolution, and applies rules.PublicAddress (the rule prebuilt images' registries share).
func publicAddressOnly(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("callback to %s: %w", address, err)
	}
	if !rules.PublicAddress(ap.Addr()) {
		return fmt.Errorf("callback to %s: %w", address, errNonPublicAddress)
	}
	return nil
}

// callbackClient is the client for a callback to rawURL.
func (d *dispatcher) callbackClient(rawURL string) *http.Client {
	if d.cfg.CallbackPrivateAddresses {
		return directCallbacks
	}
	if u, err := url.Parse(rawURL); err == nil {
		if _, err := netip.ParseAddr(u.Hostname()); err == nil {
			return directCallbacks // an address literally: the operator allowed exactly it
		}
	}
	return publicCallbacks
}

// callBack POSTs the final invocation (api.AsyncInvocation, as GET …/invocations/{id} reads
// it) to its callback URL, once more after a failure; a 3xx counts as one.
func (d *dispatcher) callBack(inv history.AsyncInvocation) {
	body, err := json.Marshal(inv.API())
	if err != nil {
		return
	}
	client := d.callbackClient(inv.CallbackURL)
	for attempt := 1; attempt <= 2; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), callbackTimeout)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, inv.CallbackURL, bytes.NewReader(body))
		if err != nil {
			cancel()
			d.log.Warn("Warning: the callback URL of an asynchronous invocation is not usable", "invocation", inv.ID, "error", err)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "sless-dispatcher")
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
			resp.Body.Close()
		}
		cancel()
		if err == nil {
			if resp.StatusCode < 300 {
				return
			}
			err = fmt.Errorf("answered %d", resp.StatusCode)
			if loc := resp.Header.Get("Location"); resp.StatusCode < 400 && loc != "" {
				err = fmt.Errorf("answered %d (redirects are not followed; %s)", resp.StatusCode, loc)
			}
		}
		d.log.Warn("Warning: the callback of an asynchronous invocation failed", "invocation", inv.ID, "attempt", attempt, "error", err)
		if errors.Is(err, errNonPublicAddress) {
			return // the same names resolve the same way a moment later
		}
	}
}

// waitCallbacks returns once the callbacks under way finished (each bounded by its timeouts).
func (d *dispatcher) waitCallbacks() {
	if n := d.pending.Load(); n > 0 {
		d.log.Info("waiting for the callbacks of asynchronous invocations", "pending", n)
	}
	d.callbacks.Wait()
}
