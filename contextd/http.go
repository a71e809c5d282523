package contextd

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/contextd/publish"
)

// serveAPI listens on the unix socket (mode 0600, in the 0700 data
// directory) and, when configured, on TCP with TLS and the token.
func (d *Daemon) serveAPI() error {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+api.Prefix+"/contexts/{context}/attributes", d.handle(func(ctx context.Context, name string, body []byte) (any, error) {
		var r api.AttrRequest
		if err := decode1(body, &r); err != nil {
			return nil, err
		}
		return d.Attr(ctx, name, r)
	}))
	mux.HandleFunc("POST "+api.Prefix+"/contexts/{context}/schedules", d.handle(func(ctx context.Context, name string, body []byte) (any, error) {
		var r api.SchedRequest
		if err := decode1(body, &r); err != nil {
			return nil, err
		}
		return d.Sched(ctx, name, r)
	}))
	mux.HandleFunc("POST "+api.Prefix+"/contexts/{context}/values", d.handle(func(ctx context.Context, name string, body []byte) (any, error) {
		var r api.ValueRequest
		if err := decode1(body, &r); err != nil {
			return nil, err
		}
		return d.Value(ctx, name, r)
	}))
	mux.HandleFunc("GET "+api.Prefix+"/contexts/{context}", d.handle(func(_ context.Context, name string, _ []byte) (any, error) {
		return d.Context(name)
	}))
	mux.HandleFunc("GET "+api.Prefix+"/contexts", d.handle(func(context.Context, string, []byte) (any, error) {
		return d.Contexts(), nil
	}))
	mux.HandleFunc("GET "+api.Prefix+"/status", d.handle(func(ctx context.Context, _ string, _ []byte) (any, error) {
		return d.Status(ctx), nil
	}))
	mux.Handle("GET /metrics", d.met.handler())
	if d.cfg.Socket != "none" {
		l, err := listenUnix(d.cfg.Socket)
		if err != nil {
			return err
		}
		d.serve(l, mux)
	}
	if d.cfg.Listen != "" {
		tok, err := os.ReadFile(d.cfg.TokenFile)
		if err != nil {
			return err
		}
		d.token = []byte(strings.TrimSpace(string(tok)))
		if len(d.token) < 16 {
			return fmt.Errorf("%s: the token must be at least 16 characters", d.cfg.TokenFile)
		}
		cert, err := tls.LoadX509KeyPair(d.cfg.TLSCert, d.cfg.TLSKey)
		if err != nil {
			return err
		}
		l, err := net.Listen("tcp", d.cfg.Listen)
		if err != nil {
			return err
		}
		tl := tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		d.serveTCP(tl, l.Addr(), d.auth(mux))
	}
	return nil
}

func (d *Daemon) serve(l net.Listener, h http.Handler) {
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	d.http = append(d.http, s)
	d.lns = append(d.lns, l)
	go s.Serve(l)
}

// tcpListener keeps the plain address of a TLS listener.
type tcpListener struct {
	net.Listener
	addr net.Addr
}

func (t tcpListener) Addr() net.Addr { return t.addr }

func (d *Daemon) serveTCP(l net.Listener, addr net.Addr, h http.Handler) {
	d.serve(tcpListener{l, addr}, h)
}

// auth requires "Authorization: Bearer <token>" (TCP only: the socket's
// mode is its access control).
func (d *Daemon) auth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), d.token) != 1 {
			d.met.rejections.WithLabelValues(api.ReasonUnauthorized).Inc()
			writeJSON(w, http.StatusUnauthorized, &api.Error{Reason: api.ReasonUnauthorized, Message: "missing or wrong bearer token"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// listenUnix listens on path with mode 0600, replacing a stale socket
// (one nobody answers on) but never a live one or another kind of file.
func listenUnix(path string) (net.Listener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another theseus-contextd is listening there", path)
		}
		os.Remove(path)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	l.(*net.UnixListener).SetUnlinkOnClose(true)
	return l, nil
}

// maxSched is the schedule file limit in bytes.
func (d *Daemon) maxSched() int64 {
	if n := d.cfg.MaxScheduleBytes; n > 0 {
		return n
	}
	return publish.DefaultMaxScheduleBytes
}

// maxBody bounds a request: a schedule file in base64, and the rest.
func (d *Daemon) maxBody() int64 { return d.maxSched()/3*4 + 8 + 1<<20 }

func (d *Daemon) handle(f func(ctx context.Context, name string, body []byte) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Method == http.MethodPost {
			var err error
			body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, d.maxBody()))
			if err != nil {
				d.met.rejections.WithLabelValues(api.ReasonTooLarge).Inc()
				writeJSON(w, http.StatusRequestEntityTooLarge, &api.Error{Reason: api.ReasonTooLarge,
					Message: fmt.Sprintf("the request is over %d bytes: a schedule file may have at most %d bytes (in base64 in the request)", d.maxBody(), d.maxSched())})
				return
			}
		}
		v, err := f(r.Context(), r.PathValue("context"), body)
		var ae *api.Error
		switch {
		case err == nil:
			writeJSON(w, http.StatusOK, v)
		case errors.As(err, &ae):
			code := http.StatusBadRequest
			switch ae.Reason {
			case api.ReasonTooLarge:
				code = http.StatusRequestEntityTooLarge
			case api.ReasonDuplicate, api.ReasonNotEmpty:
				code = http.StatusConflict
			case api.ReasonInvalidSchedule, api.ReasonBadExpression, api.ReasonUnknownAttribute, api.ReasonWrongType, api.ReasonBadReplaces:
				code = http.StatusUnprocessableEntity
			}
			writeJSON(w, code, ae)
		case Unavailable(err):
			writeJSON(w, http.StatusServiceUnavailable, &api.Error{Reason: api.ReasonUnavailable, Message: err.Error()})
		default:
			writeJSON(w, http.StatusInternalServerError, &api.Error{Reason: "internal", Message: err.Error()})
		}
	}
}

// decode1 reads one JSON request strictly, as the manifests are read: one
// object, nothing after it, no unknown field and no field twice (the
// last would silently win).
func decode1(body []byte, v any) error {
	bad := func(format string, args ...any) error {
		return &api.Error{Reason: api.ReasonBadRequest, Message: "malformed request: " + fmt.Sprintf(format, args...)}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bad("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("data after the JSON object (at byte %d)", dec.InputOffset())
	}
	// Field names, once each: the top level of the object (the requests
	// are flat), with encoding/json's tokenizer.
	tok := json.NewDecoder(bytes.NewReader(body))
	if t, err := tok.Token(); err != nil || t != json.Delim('{') {
		return bad("want a JSON object")
	}
	seen := map[string]bool{}
	for tok.More() {
		t, err := tok.Token()
		if err != nil {
			return bad("%v", err)
		}
		key, _ := t.(string)
		// encoding/json matches field names case-insensitively: so does
		// this check.
		if k := strings.ToLower(key); seen[k] {
			return bad("field %q given twice", key)
		} else {
			seen[k] = true
		}
		var skip json.RawMessage
		if err := tok.Decode(&skip); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func sortedStrings(s []string) []string {
	slices.Sort(s)
	if s == nil {
		s = []string{}
	}
	return s
}
