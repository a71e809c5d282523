// Package contextd is theseus-contextd, the context daemon
// (ARCHITECTURE.md §9, docs/contextd.md): one per node, it keeps the
// node's selection contexts identical to every other node's. Publications
// enter a replicated, ordered log: the stream of an embedded NATS server
// with JetStream (one node by default; in cluster mode the nodes join by
// routes and the stream has three replicas), run with sync on every write
// so that an acknowledged publication survives power loss. Schedule files
// go to a JetStream object store, content-addressed. A per-node
// materialiser reads the log in order and appends every entry to this
// node's context directory with fsync (contextd/publish.Writer: schedule
// file first, line after), then records the last sequence it applied,
// atomically; after a crash it resumes exactly there. NATS is the
// replication engine: the daemon implements none.
//
// Publications are validated (contextd/publish.Validator) before they are
// appended; a declaration is appended with JetStream's expected-last-
// sequence check on its context's attribute subject, so two nodes cannot
// both declare one name. The API (contextd/api) is HTTP on a unix socket
// (mode 0600) and optionally on TCP with TLS and a bearer token; /metrics
// serves Prometheus text.
package contextd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/theseus-ccl/theseus/contextd/publish"
)

// Names in NATS.
const (
	StreamName    = "THESEUS_CONTEXT"
	ObjectBucket  = "THESEUS_SCHEDULES"
	subjectPrefix = "theseus.context."
	statusSubject = "theseus.contextd.status"
	// MaxMessageBytes bounds one log entry (a line of at most 1 MiB,
	// escaped in its JSON envelope).
	MaxMessageBytes = 4 << 20
)

// Subject is the log subject of entries of kind in context name.
func Subject(name, kind string) string { return subjectPrefix + name + "." + kind }

// Config configures a daemon. Zero fields take the documented defaults,
// except Margin, whose default is asked for with a negative value (zero
// means no margin).
type Config struct {
	// DataDir holds the JetStream store, the checkpoint, the lock and the
	// default socket (default ~/.theseus/contextd; created mode 0700).
	DataDir string
	// ContextsDir is where context NAME is materialised, as ContextsDir/NAME
	// (default ~/.theseus/contexts, so that context "default" is the
	// runtime's default THESEUS_SELECTION_CONTEXT).
	ContextsDir string
	// Socket is the API's unix socket (default DataDir/api.sock); "none"
	// serves no socket.
	Socket string
	// Listen, when set, also serves the API on this TCP address, with TLS
	// (TLSCert, TLSKey) and the bearer token in TokenFile, all required.
	Listen, TLSCert, TLSKey, TokenFile string
	// Name is this node's name in the cluster (default: the host name).
	Name string
	// ClusterListen (host:port) turns on cluster mode: the address the
	// routes listen on. Routes are the other nodes' route URLs
	// (nats://host:port). ClusterName defaults to "theseus". ClusterToken,
	// when set, is the routes' shared secret.
	ClusterListen string
	Routes        []string
	ClusterName   string
	ClusterToken  string
	// Replicas of the log and the object store (default 3 in cluster mode,
	// 1 alone).
	Replicas int
	// Margin is the default valid_after's distance from now (Margin < 0:
	// the default, 1 s in cluster mode and 0 alone).
	Margin time.Duration
	// MaxScheduleBytes bounds a schedule file (0: publish.DefaultMaxScheduleBytes).
	MaxScheduleBytes int64
	// MaxVectorLen bounds vector values (0: 1024).
	MaxVectorLen int
	// ApplyWait bounds how long a publication's reply waits for this node
	// to apply it (default 10 s).
	ApplyWait time.Duration
	// Logf receives the daemon's log lines (default: none).
	Logf func(format string, args ...any)
}

func (c *Config) fill() error {
	home, _ := os.UserHomeDir()
	if c.DataDir == "" {
		if home == "" {
			return errors.New("no home directory: set the data directory")
		}
		c.DataDir = filepath.Join(home, ".theseus", "contextd")
	}
	if c.ContextsDir == "" {
		if home == "" {
			return errors.New("no home directory: set the contexts directory")
		}
		c.ContextsDir = filepath.Join(home, ".theseus", "contexts")
	}
	var err error
	if c.DataDir, err = filepath.Abs(c.DataDir); err != nil {
		return err
	}
	if c.ContextsDir, err = filepath.Abs(c.ContextsDir); err != nil {
		return err
	}
	if c.Socket == "" {
		c.Socket = filepath.Join(c.DataDir, "api.sock")
	}
	if c.Name == "" {
		if c.Name, err = os.Hostname(); err != nil || c.Name == "" {
			c.Name = "theseus-contextd"
		}
	}
	cluster := c.ClusterListen != ""
	if c.ClusterName == "" {
		c.ClusterName = "theseus"
	}
	if c.Replicas == 0 {
		c.Replicas = 1
		if cluster {
			c.Replicas = 3
		}
	}
	if c.Replicas < 1 || c.Replicas > 5 || !cluster && c.Replicas != 1 {
		return fmt.Errorf("replicas %d: want 1 alone, 1 to 5 in cluster mode", c.Replicas)
	}
	if cluster && c.Replicas > 1 && len(c.Routes) == 0 {
		// It would wait for peers it has no way to find, and never serve.
		return fmt.Errorf("cluster mode with %d replicas needs the routes of the other nodes (--routes nats://A,nats://B,...: every node, this one included)", c.Replicas)
	}
	if c.Margin < 0 {
		c.Margin = 0
		if cluster {
			c.Margin = time.Second
		}
	}
	if c.ApplyWait <= 0 {
		c.ApplyWait = 10 * time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.Listen != "" && (c.TLSCert == "" || c.TLSKey == "" || c.TokenFile == "") {
		return errors.New("a TCP API needs TLS and a token: give the certificate, the key and the token file")
	}
	return nil
}

// Daemon is one running theseus-contextd.
type Daemon struct {
	cfg  Config
	ns   *server.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	v    publish.Validator
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
	lock *os.File
	// rootLock is publish.RootLock in the contexts root, held.
	rootLock *os.File
	http     []*http.Server
	lns      []net.Listener
	token    []byte
	met      *metrics

	mu      sync.Mutex
	cond    *sync.Cond
	stream  jetstream.Stream
	objects jetstream.ObjectStore
	m       *materialiser
	ctxMu   map[string]*sync.Mutex
	seen    map[string]seenNode // status: every node's last answer
	lastErr string              // the materialiser's or the log's current error
	last    struct {
		seq uint64
		at  time.Time
	}
}

// Start starts a daemon: its NATS server, its API, and in the background
// the log's setup and the materialiser (Ready waits for them). Errors: a
// bad configuration, a data directory in use by another daemon, a socket
// in use, a NATS server that does not start.
func Start(cfg Config) (*Daemon, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(cfg.DataDir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%s is in use by another theseus-contextd (%v)", cfg.DataDir, err)
	}
	root, err := publish.LockRoot(cfg.ContextsDir, fmt.Sprintf("pid %d, data %s", os.Getpid(), cfg.DataDir))
	if err != nil {
		unix.Flock(int(lock.Fd()), unix.LOCK_UN)
		lock.Close()
		return nil, err
	}
	d := &Daemon{cfg: cfg, lock: lock, rootLock: root, ctxMu: map[string]*sync.Mutex{}, seen: map[string]seenNode{}, lastErr: "starting: the replicated log is not set up yet"}
	d.cond = sync.NewCond(&d.mu)
	d.ctx, d.stop = context.WithCancel(context.Background())
	d.v = publish.Validator{MaxScheduleBytes: cfg.MaxScheduleBytes, MaxVectorLen: cfg.MaxVectorLen, Margin: cfg.Margin,
		TempDir: cfg.DataDir}
	fail := func(err error) (*Daemon, error) {
		d.Close()
		return nil, err
	}
	if d.m, err = openMaterialiser(d); err != nil {
		return fail(err)
	}
	if err := d.startNATS(); err != nil {
		return fail(err)
	}
	d.met = newMetrics(d)
	if err := d.serveAPI(); err != nil {
		return fail(err)
	}
	if _, err := d.nc.Subscribe(statusSubject, d.answerStatus); err != nil {
		return fail(err)
	}
	d.wg.Add(1)
	go d.run()
	return d, nil
}

func (d *Daemon) startNATS() error {
	c := &d.cfg
	opts := &server.Options{
		ServerName: c.Name,
		JetStream:  true,
		StoreDir:   filepath.Join(c.DataDir, "jetstream"),
		// Jepsen (NATS 2.12.1, 2025-12): by default JetStream acknowledges
		// before fsync; sync every write.
		SyncAlways: true,
		MaxPayload: MaxMessageBytes,
		NoSigs:     true,
		NoLog:      true,
	}
	if c.ClusterListen == "" {
		opts.DontListen = true
	} else {
		// DontListen would also turn off the routes (nats-server#5174):
		// the client port listens, on loopback only, on a free port.
		opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
		host, port, err := net.SplitHostPort(c.ClusterListen)
		if err != nil {
			return fmt.Errorf("cluster listen address %q: %v", c.ClusterListen, err)
		}
		var p int
		if _, err := fmt.Sscan(port, &p); err != nil {
			return fmt.Errorf("cluster listen address %q: bad port", c.ClusterListen)
		}
		opts.Cluster = server.ClusterOpts{Name: c.ClusterName, Host: host, Port: p}
		if c.ClusterToken != "" {
			opts.Cluster.Username, opts.Cluster.Password = "theseus", c.ClusterToken
		}
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil || u.Host == "" {
				return fmt.Errorf("route %q: want nats://host:port", r)
			}
			if c.ClusterToken != "" {
				u.User = url.UserPassword("theseus", c.ClusterToken)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("starting the NATS server: %w", err)
	}
	d.ns = ns
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		return errors.New("the NATS server did not become ready in 30 s")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.Name("theseus-contextd "+c.Name), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	d.nc = nc
	d.js, err = jetstream.New(nc, jetstream.WithDefaultTimeout(5*time.Second))
	return err
}

// run sets up the log and the object store (retrying until the cluster
// has a quorum) and then runs the materialiser.
func (d *Daemon) run() {
	defer d.wg.Done()
	logged := time.Now()
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, 500*time.Millisecond) {
		err := d.setup()
		if err == nil {
			break
		}
		d.setErr("the replicated log is not available yet: " + err.Error())
		if time.Since(logged) > 10*time.Second {
			// Say so: a cluster without a quorum of its nodes waits here.
			logged = time.Now()
			up, known := d.reachable(d.ctx)
			d.cfg.Logf("theseus-contextd %s: waiting for the replicated log (%d replicas: a majority of them must be up and routed; %d of %d nodes answer): %v",
				d.cfg.Name, d.cfg.Replicas, up, known, err)
		}
		select {
		case <-d.ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
	d.setErr("")
	d.cfg.Logf("theseus-contextd %s: log %s ready (%d replicas); applied up to %d", d.cfg.Name, StreamName, d.cfg.Replicas, d.m.applied)
	d.m.run()
}

func (d *Daemon) setup() error {
	// Short: while the cluster elects its leaders a request may go
	// unanswered, and the next attempt is the quicker way on.
	ctx, cancel := context.WithTimeout(d.ctx, 2*time.Second)
	defer cancel()
	st, err := d.js.Stream(ctx, StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = d.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: StreamName, Subjects: []string{subjectPrefix + ">"}, Storage: jetstream.FileStorage,
			Replicas: d.cfg.Replicas, Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardNew,
			MaxMsgs: -1, MaxBytes: -1, MaxMsgSize: MaxMessageBytes, Duplicates: 2 * time.Minute,
			// The log is append-only, like the files it feeds.
			DenyDelete: true, DenyPurge: true,
			Description: "Theseus selection-context publications (theseus-contextd)",
		})
	}
	if err != nil {
		return err
	}
	obs, err := d.js.ObjectStore(ctx, ObjectBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = d.js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: ObjectBucket, Storage: jetstream.FileStorage,
			Replicas: d.cfg.Replicas, Description: "Theseus schedule files by SHA-256 (theseus-contextd)"})
	}
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.stream, d.objects = st, obs
	d.mu.Unlock()
	return nil
}

func (d *Daemon) setErr(s string) {
	d.mu.Lock()
	d.lastErr = s
	d.mu.Unlock()
}

// log returns the stream and the object store once set up.
func (d *Daemon) log() (jetstream.Stream, jetstream.ObjectStore, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stream == nil {
		msg := "the replicated log is not set up yet"
		if d.lastErr != "" {
			msg = d.lastErr
		}
		return nil, nil, &unavailable{msg}
	}
	return d.stream, d.objects, nil
}

// unavailable is an error of the log's availability (HTTP 503).
type unavailable struct{ msg string }

func (u *unavailable) Error() string { return u.msg }

// Ready waits until the log is set up and the materialiser has caught up
// with the log as it was when Ready was called.
func (d *Daemon) Ready(ctx context.Context) error {
	for {
		st, _, err := d.log()
		if err == nil {
			info, err := st.Info(ctx)
			if err == nil {
				return d.WaitApplied(ctx, info.State.LastSeq)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("theseus-contextd %s not ready: %w (%v)", d.cfg.Name, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Applied is the sequence of the last log entry applied on this node.
func (d *Daemon) Applied() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.applied
}

// WaitApplied waits until this node has applied seq.
func (d *Daemon) WaitApplied(ctx context.Context, seq uint64) error {
	stop := context.AfterFunc(ctx, func() { d.mu.Lock(); d.cond.Broadcast(); d.mu.Unlock() })
	defer stop()
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.m.applied < seq {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("node %s applied %d, waiting for %d: %w", d.cfg.Name, d.m.applied, seq, err)
		}
		if d.ctx.Err() != nil {
			return errors.New("the daemon is stopping")
		}
		d.cond.Wait()
	}
	return nil
}

// Name is the node's name; ContextsDir the contexts root; Socket the API
// socket ("" when none); TCPAddr the TCP API's address ("" when none);
// ClusterAddr the routes' address ("" alone).
func (d *Daemon) Name() string        { return d.cfg.Name }
func (d *Daemon) ContextsDir() string { return d.cfg.ContextsDir }
func (d *Daemon) Socket() string {
	if d.cfg.Socket == "none" {
		return ""
	}
	return d.cfg.Socket
}
func (d *Daemon) TCPAddr() string {
	for _, l := range d.lns {
		if l.Addr().Network() == "tcp" {
			return l.Addr().String()
		}
	}
	return ""
}
func (d *Daemon) ClusterAddr() string {
	if a := d.ns.ClusterAddr(); a != nil {
		return a.String()
	}
	return ""
}

// Close stops the daemon: the API, the materialiser (after the batch it is
// applying), the NATS server.
func (d *Daemon) Close() error {
	if d.stop != nil {
		d.stop()
	}
	for _, h := range d.http {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		h.Shutdown(ctx)
		cancel()
	}
	if d.cond != nil {
		d.mu.Lock()
		d.cond.Broadcast()
		d.mu.Unlock()
	}
	if d.m != nil {
		d.m.stopConsumer()
	}
	d.wg.Wait()
	if d.nc != nil {
		d.nc.Close()
	}
	if d.ns != nil {
		d.ns.Shutdown()
		d.ns.WaitForShutdown()
	}
	if d.m != nil {
		d.m.w.Close()
		if d.m.journal != nil {
			d.m.journal.Close()
		}
	}
	if d.cfg.Socket != "none" && d.cfg.Socket != "" && len(d.lns) > 0 {
		os.Remove(d.cfg.Socket)
	}
	if d.rootLock != nil {
		unix.Flock(int(d.rootLock.Fd()), unix.LOCK_UN)
		d.rootLock.Close()
	}
	if d.lock != nil {
		unix.Flock(int(d.lock.Fd()), unix.LOCK_UN)
		d.lock.Close()
	}
	return nil
}

// contextDir is where context name is materialised.
func (d *Daemon) contextDir(name string) string { return filepath.Join(d.cfg.ContextsDir, name) }

// ctxLock serialises this node's publications to one context.
func (d *Daemon) ctxLock(name string) *sync.Mutex {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.ctxMu[name]
	if m == nil {
		m = &sync.Mutex{}
		d.ctxMu[name] = m
	}
	return m
}
