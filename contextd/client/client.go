// Package client talks to theseus-contextd's API (contextd/api) over its
// unix socket, or over TCP with TLS and a bearer token: what
// theseus-context and theseus-bench use. It depends on no NATS code.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/theseus-ccl/theseus/contextd/api"
)

// DefaultSocket is the socket a daemon started without flags listens on:
// ~/.theseus/contextd/api.sock ("" without a home directory).
func DefaultSocket() string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".theseus", "contextd", "api.sock")
}

// Client is a connection to one daemon.
type Client struct {
	base  string
	token string
	hc    *http.Client
	where string
}

// Options choose the daemon. Addr is "" (the unix socket Socket, default
// DefaultSocket()) or an https:// URL of a daemon's TCP API, which needs
// Token (the bearer token) and, for a certificate no system root signs,
// CAFile.
type Options struct {
	Socket string
	Addr   string
	Token  string
	CAFile string
	// Timeout bounds each request (default 60 s: a publication waits for
	// the log and for this node to apply it).
	Timeout time.Duration
}

// New returns a client; it does not connect until the first request.
func New(o Options) (*Client, error) {
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	c := &Client{token: o.Token}
	if o.Addr == "" {
		sock := o.Socket
		if sock == "" {
			sock = DefaultSocket()
		}
		if sock == "" {
			return nil, errors.New("no home directory: name the daemon's socket")
		}
		c.where, c.base = sock, "http://theseus-contextd"
		c.hc = &http.Client{Timeout: o.Timeout, Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			}}}
		return c, nil
	}
	u, err := url.Parse(o.Addr)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("daemon address %q: want https://host:port (the TCP API is TLS only)", o.Addr)
	}
	if o.Token == "" {
		return nil, errors.New("the TCP API needs the daemon's token")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", o.CAFile)
		}
	}
	c.where, c.base = o.Addr, strings.TrimSuffix(o.Addr, "/")
	c.hc = &http.Client{Timeout: o.Timeout, Transport: &http.Transport{TLSClientConfig: tc}}
	return c, nil
}

// Where names the daemon (its socket or URL) for messages.
func (c *Client) Where() string { return c.where }

// ErrNoDaemon is wrapped by errors that mean nothing answers on the socket.
var ErrNoDaemon = errors.New("no theseus-contextd is running")

// ErrUnavailable is wrapped by the errors of a 503: the daemon's replicated
// log is not available (no quorum, starting, stopping); the message says
// whether the publication may have been sent. The request may be retried.
var ErrUnavailable = errors.New("the context daemon's log is unavailable")

// ErrNoAnswer is wrapped by the errors of a request that was sent and got
// no answer: the daemon closed the connection (it died, or was stopped) or
// did not answer in time. A publication's outcome is then unknown: it may
// be in the log. Sending it again with the same publication id is safe.
var ErrNoAnswer = errors.New("the daemon did not answer")

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Op == "dial" {
			return fmt.Errorf("%w at %s (start it, or use --local DIR): %v", ErrNoDaemon, c.where, oe.Err)
		}
		return noAnswer(c.where, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return noAnswer(c.where, err)
	}
	if resp.StatusCode != http.StatusOK {
		e := &api.Error{}
		if json.Unmarshal(data, e) != nil || e.Message == "" {
			return fmt.Errorf("%s: %s: %s", c.where, resp.Status, strings.TrimSpace(string(data)))
		}
		switch {
		case resp.StatusCode == http.StatusServiceUnavailable:
			return fmt.Errorf("%w: %s", ErrUnavailable, e.Message)
		case resp.StatusCode >= 500:
			return fmt.Errorf("%s: %s", c.where, e.Message)
		}
		return e
	}
	return json.Unmarshal(data, out)
}

// noAnswer describes a request that got no answer (Go's transport error:
// EOF, a reset connection, a broken pipe, a timeout).
func noAnswer(where string, err error) error {
	why := "closed the connection before answering"
	var ue *url.Error
	if errors.As(err, &ue) && ue.Timeout() {
		why = "did not answer in time"
	}
	if errors.As(err, &ue) {
		err = ue.Err // without the method and the URL, which is the socket's dummy host
	}
	return fmt.Errorf("%w: theseus-contextd at %s %s (%v)", ErrNoAnswer, where, why, err)
}

func ctxPath(name, rest string) string {
	return api.Prefix + "/contexts/" + url.PathEscape(name) + rest
}

// Attr, Sched and Value publish to context name; a rejection is an
// *api.Error. A request without a publication id is given a random one,
// so that the daemon deduplicates a request sent twice; when the daemon
// does not answer (ErrNoAnswer), the error names it and says that the
// publication may or may not be in the log.
func (c *Client) Attr(ctx context.Context, name string, r api.AttrRequest) (*api.Published, error) {
	var p api.Published
	r.PublicationID = pubID(r.PublicationID)
	return &p, outcome(r.PublicationID, c.do(ctx, http.MethodPost, ctxPath(name, "/attributes"), r, &p))
}

func (c *Client) Sched(ctx context.Context, name string, r api.SchedRequest) (*api.Published, error) {
	var p api.Published
	r.PublicationID = pubID(r.PublicationID)
	return &p, outcome(r.PublicationID, c.do(ctx, http.MethodPost, ctxPath(name, "/schedules"), r, &p))
}

func (c *Client) Value(ctx context.Context, name string, r api.ValueRequest) (*api.Published, error) {
	var p api.Published
	r.PublicationID = pubID(r.PublicationID)
	return &p, outcome(r.PublicationID, c.do(ctx, http.MethodPost, ctxPath(name, "/values"), r, &p))
}

// pubID is id, or a new random one when id is "".
func pubID(id string) string {
	if id != "" {
		return id
	}
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// outcome adds to an error of a publication with id what is known of its
// fate.
func outcome(id string, err error) error {
	if errors.Is(err, ErrNoAnswer) {
		return fmt.Errorf("%w; the publication (id %s) may or may not be in the log: check with theseus-context list or show before publishing it again", err, id)
	}
	return err
}

// Context returns the daemon's copy of context name.
func (c *Client) Context(ctx context.Context, name string) (*api.Context, error) {
	var v api.Context
	return &v, c.do(ctx, http.MethodGet, ctxPath(name, ""), nil, &v)
}

// Status returns every node's state.
func (c *Client) Status(ctx context.Context) (*api.Status, error) {
	var s api.Status
	return &s, c.do(ctx, http.MethodGet, api.Prefix+"/status", nil, &s)
}

// Metrics returns the daemon's /metrics text.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return "", err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
