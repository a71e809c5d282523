package contextd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/contextd/publish"
)

// checkpoint is what the materialiser has applied: the log sequence, the
// bytes of every file it wrote (by path relative to the contexts root),
// and per context the sequence of its last attribute entry (the
// compare-and-set point of declarations). It is kept in a journal,
// DataDir/materialised.jsonl: the first line the whole state, every later
// line what one batch changed, each appended and fsynced after the files
// it describes are fsynced (one fsync per batch). Reading it replays the
// lines and ignores a torn last one (a crash mid-append: the batch is
// rolled forward again). Past journalMax bytes the journal is compacted:
// the whole state written to a temporary file, fsynced, renamed over it.
type checkpoint struct {
	Version int               `json:"version,omitempty"`
	Seq     uint64            `json:"seq"`
	Sizes   map[string]int64  `json:"sizes,omitempty"`
	AttrSeq map[string]uint64 `json:"attr_seq,omitempty"`
}

const journalMax = 1 << 20

const checkpointFile = "materialised.jsonl"

// materialiser applies the log to this node's context directories.
type materialiser struct {
	d       *Daemon
	w       *publish.Writer
	applied uint64 // under d.mu
	models  map[string]*publish.Model
	recent  map[uint64]int    // seq -> position of the entry in its file, for replies; under d.mu
	ids     map[string]uint64 // message id (publication id) -> seq, of the entries in recent; under d.mu
	inbox   chan jetstream.Msg
	cc      jetstream.ConsumeContext
	journal *os.File
	attrSeq map[string]uint64 // as recorded
}

func openMaterialiser(d *Daemon) (*materialiser, error) {
	m := &materialiser{d: d, models: map[string]*publish.Model{}, recent: map[uint64]int{}, ids: map[string]uint64{}, inbox: make(chan jetstream.Msg, 4096),
		attrSeq: map[string]uint64{}}
	cp, err := readJournal(filepath.Join(d.cfg.DataDir, checkpointFile))
	if err != nil {
		return nil, err
	}
	m.applied = cp.Seq
	m.w = &publish.Writer{Root: d.cfg.ContextsDir, Sizes: cp.Sizes}
	// Each context's model holds what the checkpoint records; what a crash
	// left beyond it is rolled forward as the log is applied again.
	limits := map[string]map[string]int64{}
	for rel, n := range cp.Sizes {
		ctx, file, _ := strings.Cut(rel, "/")
		if limits[ctx] == nil {
			limits[ctx] = map[string]int64{}
		}
		limits[ctx][file] = n
	}
	for ctx, lim := range limits {
		mod, err := publish.LoadDir(ctx, d.contextDir(ctx), d.cfg.MaxVectorLen, lim)
		if err != nil {
			return nil, err
		}
		mod.AttrSeq = cp.AttrSeq[ctx]
		m.models[ctx] = mod
	}
	for k, v := range cp.AttrSeq {
		m.attrSeq[k] = v
	}
	// Start the journal afresh with the whole state.
	if err := m.compact(cp); err != nil {
		return nil, err
	}
	return m, nil
}

// readJournal replays the checkpoint journal (an empty state when there
// is none).
func readJournal(path string) (checkpoint, error) {
	cp := checkpoint{Sizes: map[string]int64{}, AttrSeq: map[string]uint64{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cp, nil
	}
	if err != nil {
		return cp, err
	}
	for n := 1; len(b) > 0; n++ {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break // torn by a crash: that batch is rolled forward again
		}
		var x checkpoint
		if err := json.Unmarshal(b[:i], &x); err != nil || n == 1 && x.Version != 1 {
			return cp, fmt.Errorf("%s:%d: not a checkpoint of this daemon (%v)", path, n, err)
		}
		cp.Seq = x.Seq
		for k, v := range x.Sizes {
			cp.Sizes[k] = v
		}
		for k, v := range x.AttrSeq {
			cp.AttrSeq[k] = v
		}
		b = b[i+1:]
	}
	return cp, nil
}

// compact replaces the journal with one line holding cp.
func (m *materialiser) compact(cp checkpoint) error {
	cp.Version = 1
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	path := filepath.Join(m.d.cfg.DataDir, checkpointFile)
	if err := publish.WriteFileDurable(path, append(b, '\n'), 0o600); err != nil {
		return err
	}
	if m.journal != nil {
		m.journal.Close()
	}
	m.journal, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
	return err
}

// record appends what a batch changed to the journal and fsyncs it.
func (m *materialiser) record(seq uint64, changed map[string]bool, attrSeq map[string]uint64) error {
	x := checkpoint{Seq: seq, Sizes: map[string]int64{}, AttrSeq: map[string]uint64{}}
	for rel := range changed {
		x.Sizes[rel] = m.w.Sizes[rel]
	}
	for k, v := range attrSeq {
		if m.attrSeq[k] != v {
			x.AttrSeq[k] = v
			m.attrSeq[k] = v
		}
	}
	b, err := json.Marshal(x)
	if err != nil {
		return err
	}
	if _, err := m.journal.Write(append(b, '\n')); err != nil {
		return err
	}
	if err := m.journal.Sync(); err != nil {
		return err
	}
	if st, err := m.journal.Stat(); err == nil && st.Size() > journalMax {
		return m.compact(checkpoint{Seq: seq, Sizes: m.w.Sizes, AttrSeq: m.attrSeq})
	}
	return nil
}

// model returns context name's model (under d.mu), creating an empty one.
func (m *materialiser) model(name string) *publish.Model {
	mod := m.models[name]
	if mod == nil {
		mod = publish.NewModel(name, m.d.contextDir(name), m.d.cfg.MaxVectorLen)
		m.models[name] = mod
	}
	return mod
}

func (m *materialiser) stopConsumer() {
	m.d.mu.Lock()
	cc := m.cc
	m.d.mu.Unlock()
	if cc != nil {
		cc.Stop()
	}
}

// run consumes the log from the entry after the last applied one, in
// order (a JetStream ordered consumer, which recreates itself from the
// last delivered sequence when it loses its server), and applies it in
// batches: every entry that has arrived, then one fsync per file and one
// checkpoint.
func (m *materialiser) run() {
	d := m.d
	for backoff := 50 * time.Millisecond; d.ctx.Err() == nil; backoff = min(2*backoff, 2*time.Second) {
		d.mu.Lock()
		start := m.applied + 1
		d.mu.Unlock()
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subjectPrefix + ">"},
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start, InactiveThreshold: time.Minute}
		ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
		cons, err := d.js.OrderedConsumer(ctx, StreamName, cfg)
		cancel()
		if err == nil {
			var cc jetstream.ConsumeContext
			cc, err = cons.Consume(func(msg jetstream.Msg) {
				select {
				case m.inbox <- msg:
				case <-d.ctx.Done():
				}
			})
			if err == nil {
				d.mu.Lock()
				m.cc = cc
				if strings.HasPrefix(d.lastErr, "materialiser: ") {
					d.lastErr = "" // the consumer is back: what stopped it is over
				}
				d.mu.Unlock()
				err = m.applyLoop()
				cc.Stop()
				m.drain()
				if err == nil {
					return
				}
				if errors.Is(err, errOutOfOrder) {
					backoff = 25 * time.Millisecond
					continue
				}
			}
		}
		d.setErr("materialiser: " + err.Error())
		d.cfg.Logf("theseus-contextd %s: materialiser: %v (retrying)", d.cfg.Name, err)
		select {
		case <-d.ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

var errOutOfOrder = errors.New("log entries out of order")

// drain empties the inbox of a consumer that was stopped.
func (m *materialiser) drain() {
	for {
		select {
		case <-m.inbox:
		default:
			return
		}
	}
}

// applyLoop applies batches until the daemon stops (nil) or an entry
// cannot be applied (its error; the batch before it is kept).
func (m *materialiser) applyLoop() error {
	d := m.d
	for {
		var batch []jetstream.Msg
		select {
		case <-d.ctx.Done():
			return nil
		case msg := <-m.inbox:
			batch = append(batch, msg)
		}
	drain:
		for len(batch) < 1024 {
			select {
			case msg := <-m.inbox:
				batch = append(batch, msg)
			default:
				break drain
			}
		}
		if err := m.apply(batch); err != nil {
			return err
		}
	}
}

// apply applies a batch of log entries and records it.
func (m *materialiser) apply(batch []jetstream.Msg) error {
	d := m.d
	d.mu.Lock()
	applied := m.applied
	d.mu.Unlock()
	type done struct {
		seq  uint64
		ctx  string
		kind string
		attr string
		line []byte
		id   string // the message id
	}
	var dones []done
	var failure error
	last := applied
	for _, msg := range batch {
		meta, err := msg.Metadata()
		if err != nil {
			continue
		}
		seq := meta.Sequence.Stream
		if seq <= last {
			continue // delivered again after a consumer reset
		}
		if seq != last+1 {
			// Left in the inbox by a consumer that was replaced: start
			// again right after the last entry applied.
			failure = fmt.Errorf("%w: entry %d after %d", errOutOfOrder, seq, last)
			break
		}
		ctxName, kind, e, why := decode(msg.Subject(), msg.Data())
		if why != "" {
			// The same on every node: the entry is skipped everywhere.
			d.cfg.Logf("theseus-contextd %s: log entry %d skipped: %s", d.cfg.Name, seq, why)
			d.met.rejections.WithLabelValues("invalid_log_entry").Inc()
			last = seq
			dones = append(dones, done{seq: seq})
			continue
		}
		err = m.w.Apply(ctxName, e, func() ([]byte, error) { return m.fetch(e.Object.Name) })
		if err != nil {
			failure = fmt.Errorf("log entry %d (context %s): %w", seq, ctxName, err)
			break
		}
		last = seq
		dones = append(dones, done{seq, ctxName, kind, e.Attr, []byte(e.Line), msg.Headers().Get(jetstream.MsgIDHeader)})
	}
	if len(dones) == 0 {
		return failure
	}
	changed := m.w.Dirty()
	if err := m.w.Sync(); err != nil {
		return err
	}
	// The models and the checkpoint advance together, under d.mu.
	d.mu.Lock()
	for _, x := range dones {
		if x.ctx == "" {
			continue
		}
		mod := m.model(x.ctx)
		m.recent[x.seq] = mod.Add(x.kind, x.attr, x.line)
		if x.id != "" {
			m.ids[x.id] = x.seq
		}
		if x.kind == api.KindAttr {
			mod.AttrSeq = x.seq
		}
	}
	attrSeq := map[string]uint64{}
	for name, mod := range m.models {
		attrSeq[name] = mod.AttrSeq
	}
	d.mu.Unlock()
	if err := m.record(last, changed, attrSeq); err != nil {
		return fmt.Errorf("recording the checkpoint: %w", err)
	}
	d.mu.Lock()
	m.applied = last
	for s := range m.recent {
		if s+8192 < last {
			delete(m.recent, s)
		}
	}
	if len(m.ids) > 2*8192 {
		for id, s := range m.ids {
			if s+8192 < last {
				delete(m.ids, id)
			}
		}
	}
	if failure == nil && strings.HasPrefix(d.lastErr, "materialiser: ") {
		d.lastErr = ""
	}
	d.cond.Broadcast()
	d.mu.Unlock()
	d.met.applied.Add(float64(len(dones)))
	return failure
}

// decode reads a log entry: its subject names its context and kind.
func decode(subject string, data []byte) (ctx, kind string, e *publish.Entry, why string) {
	rest, ok := strings.CutPrefix(subject, subjectPrefix)
	ctx, kind, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return "", "", nil, fmt.Sprintf("subject %q is not %s<context>.<kind>", subject, subjectPrefix)
	}
	if err := api.CheckContext(ctx); err != nil {
		return "", "", nil, err.Error()
	}
	e = &publish.Entry{}
	if err := json.Unmarshal(data, e); err != nil {
		return "", "", nil, "not an entry: " + err.Error()
	}
	if e.Kind != kind {
		return "", "", nil, fmt.Sprintf("entry of kind %q on the subject of kind %q", e.Kind, kind)
	}
	if err := e.Check(); err != nil {
		return "", "", nil, err.Error()
	}
	return ctx, kind, e, ""
}

// fetch reads a schedule file from the object store, retrying while the
// store is unavailable (the entry cannot be applied without it, and every
// later entry waits for it: order is kept).
func (m *materialiser) fetch(name string) ([]byte, error) {
	d := m.d
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		_, obs, err := d.log()
		if err == nil {
			ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
			var b []byte
			b, err = obs.GetBytes(ctx, name)
			cancel()
			if err == nil {
				return b, nil
			}
		}
		d.setErr(fmt.Sprintf("materialiser: fetching schedule file %s: %v", name, err))
		select {
		case <-d.ctx.Done():
			return nil, errors.New("the daemon is stopping")
		case <-time.After(backoff):
		}
	}
}
