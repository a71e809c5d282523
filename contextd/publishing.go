package contextd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/contextd/publish"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// builder validates one publication against a context's model.
type builder func(v *publish.Validator, m *publish.Model) (*publish.Entry, []byte, *publish.Rejection)

// Attr, Sched and Value publish to context name through this node: the
// request is validated against this node's copy of the context, appended
// to the log, and the reply sent once this node has applied it (or
// Config.ApplyWait has passed: Published.Applied false). A rejection is
// an *api.Error; an unavailable log an error Unavailable reports. A
// request with a publication id that the log already holds is not
// published again: the reply describes the entry logged (Duplicate).
func (d *Daemon) Attr(ctx context.Context, name string, r api.AttrRequest) (*api.Published, error) {
	return d.publish(ctx, name, api.KindAttr, r.PublicationID, func(v *publish.Validator, m *publish.Model) (*publish.Entry, []byte, *publish.Rejection) {
		e, rej := v.Attr(m, r)
		return e, nil, rej
	})
}

func (d *Daemon) Sched(ctx context.Context, name string, r api.SchedRequest) (*api.Published, error) {
	return d.publish(ctx, name, api.KindSched, r.PublicationID, func(v *publish.Validator, m *publish.Model) (*publish.Entry, []byte, *publish.Rejection) {
		return v.Sched(m, r)
	})
}

func (d *Daemon) Value(ctx context.Context, name string, r api.ValueRequest) (*api.Published, error) {
	return d.publish(ctx, name, api.KindValue, r.PublicationID, func(v *publish.Validator, m *publish.Model) (*publish.Entry, []byte, *publish.Rejection) {
		e, rej := v.Value(m, r)
		return e, nil, rej
	})
}

// Unavailable reports whether err means the replicated log could not be
// reached (no quorum, the daemon starting or stopping): the request may be
// retried.
func Unavailable(err error) bool {
	var u *unavailable
	return errors.As(err, &u)
}

func (d *Daemon) rejected(rej *publish.Rejection) error {
	d.met.rejections.WithLabelValues(rej.Reason).Inc()
	return &rej.Error
}

// Context returns this node's copy of context name.
func (d *Daemon) Context(name string) (*api.Context, error) {
	if err := api.CheckContext(name); err != nil {
		return nil, &api.Error{Reason: api.ReasonBadName, Message: err.Error()}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.m.models[name]
	if m == nil { // not published to (yet): empty, and not remembered
		m = publish.NewModel(name, d.contextDir(name), d.cfg.MaxVectorLen)
	}
	c := m.Context()
	return &c, nil
}

// Contexts lists the contexts this node has materialised.
func (d *Daemon) Contexts() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for name, m := range d.m.models {
		if !m.Empty() {
			out = append(out, name)
		}
	}
	return sortedStrings(out)
}

func (d *Daemon) publish(ctx context.Context, name, kind, pubID string, build builder) (*api.Published, error) {
	if err := api.CheckContext(name); err != nil {
		return nil, d.rejected(&publish.Rejection{Error: api.Error{Reason: api.ReasonBadName, Message: err.Error()}})
	}
	if pubID != "" {
		if err := api.CheckPublicationID(pubID); err != nil {
			return nil, d.rejected(&publish.Rejection{Error: api.Error{Reason: api.ReasonBadRequest, Message: err.Error()}})
		}
	}
	st, obs, err := d.log()
	if err != nil {
		return nil, err
	}
	if err := d.foreign(name); err != nil {
		return nil, d.rejected(&publish.Rejection{Error: api.Error{Reason: api.ReasonBadRequest, Message: err.Error()}})
	}
	if kind == api.KindAttr {
		// Declarations are compare-and-set on the context's attribute
		// subject: one at a time per node saves the retries. Schedules and
		// values need no order among themselves beyond the log's.
		mu := d.ctxLock(name)
		mu.Lock()
		defer mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	synced := false
	sync := func() error {
		synced = true
		info, err := st.Info(ctx)
		if err != nil {
			return d.noLog(ctx, "reading the log's head", err, false)
		}
		wctx, cancel := context.WithTimeout(ctx, d.cfg.ApplyWait)
		defer cancel()
		return d.WaitApplied(wctx, info.State.LastSeq)
	}
	for attempt := 0; ; attempt++ {
		d.mu.Lock()
		logged, dup := d.m.ids[pubID]
		m := d.m.model(name).Clone()
		d.mu.Unlock()
		if pubID != "" && dup {
			return d.logged(ctx, st, name, kind, pubID, logged)
		}
		e, data, rej := build(&d.v, m)
		if rej != nil {
			if rej.ModelDependent && !synced {
				if err := sync(); err != nil {
					return nil, err
				}
				continue
			}
			return nil, d.rejected(rej)
		}
		if data != nil {
			if err := d.putObject(ctx, obs, e.Object, data); err != nil {
				return nil, err
			}
		}
		seq, dupAck, err := d.appendEntry(ctx, st, name, e, m.AttrSeq, pubID)
		if errors.Is(err, errConflict) && attempt < 100 {
			// Another node declared an attribute of this context first:
			// catch up and validate again (the name may be taken now).
			if err := sync(); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if dupAck {
			return d.logged(ctx, st, name, kind, pubID, seq)
		}
		d.met.publications.WithLabelValues(kind).Inc()
		wctx, cancel := context.WithTimeout(ctx, d.cfg.ApplyWait)
		werr := d.WaitApplied(wctx, seq)
		cancel()
		d.mu.Lock()
		id, ok := d.m.recent[seq]
		mod := d.m.model(name).Clone()
		d.mu.Unlock()
		p := publish.Reply(mod, e, id, seq)
		p.Applied = werr == nil && ok
		if !p.Applied {
			p.ID = -1
		}
		p.PublicationID = pubID
		return p, nil
	}
}

// logged replies to a publication whose id the log already holds, at seq:
// with that entry, as the log has it, once this node has applied it. An id
// that names an entry of another context or kind is refused.
func (d *Daemon) logged(ctx context.Context, st jetstream.Stream, name, kind, pubID string, seq uint64) (*api.Published, error) {
	raw, err := st.GetMsg(ctx, seq)
	if err != nil {
		return nil, d.noLog(ctx, fmt.Sprintf("reading log entry %d", seq), err, false)
	}
	ctxName, k, e, why := decode(raw.Subject, raw.Data)
	if why != "" || ctxName != name || k != kind {
		return nil, d.rejected(&publish.Rejection{Error: api.Error{Reason: api.ReasonBadRequest,
			Message: fmt.Sprintf("publication id %q is that of log entry %d, another publication (%s of context %s): give each publication its own id", pubID, seq, k, ctxName)}})
	}
	wctx, cancel := context.WithTimeout(ctx, d.cfg.ApplyWait)
	werr := d.WaitApplied(wctx, seq)
	cancel()
	d.mu.Lock()
	id, ok := d.m.recent[seq]
	mod := d.m.model(name).Clone()
	d.mu.Unlock()
	p := publish.Reply(mod, e, id, seq)
	p.Applied, p.PublicationID, p.Duplicate = werr == nil && ok, pubID, true
	if !p.Applied {
		p.ID = -1
	}
	return p, nil
}

// noLog turns a failure to reach the log into an unavailable error that
// says whether a quorum of the cluster's nodes answers. sent: the entry
// may have reached the log's leader (no acknowledgement came back).
func (d *Daemon) noLog(ctx context.Context, what string, err error, sent bool) error {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	up, known := d.reachable(qctx)
	quorum := d.cfg.Replicas/2 + 1
	outcome := "nothing was published"
	if sent {
		outcome = "the publication was not acknowledged: it is not in the log now, but may enter it when a quorum is back (retry with the same publication id to be sure it is there once)"
	}
	if up < quorum {
		return &unavailable{fmt.Sprintf("no quorum: %d of %d nodes answer and the log needs %d of its %d replicas; %s; retry when a quorum of the nodes is up (%s: %v)",
			up, known, quorum, d.cfg.Replicas, outcome, what, err)}
	}
	return &unavailable{fmt.Sprintf("the replicated log did not answer (%s: %v; %d of %d nodes answer); %s; retry", what, err, up, known, outcome)}
}

// foreign refuses a context whose directory holds entries this daemon did
// not write (a hand-made context at the same path): the materialiser would
// stop at the first line it appends there.
func (d *Daemon) foreign(name string) error {
	d.mu.Lock()
	mod := d.m.models[name]
	known := mod != nil && !mod.Empty()
	d.mu.Unlock()
	if known {
		return nil
	}
	dir := d.contextDir(name)
	for _, f := range []string{manifest.AttributeManifest, manifest.ScheduleManifest} {
		if st, err := os.Stat(filepath.Join(dir, f)); err == nil && st.Size() > 0 {
			d.mu.Lock()
			_, recorded := d.m.w.Sizes[name+"/"+f]
			d.mu.Unlock()
			if !recorded {
				return fmt.Errorf("%s holds a selection context this daemon did not write: move it away, publish to another --context, or start the daemon with another contexts directory", dir)
			}
		}
	}
	return nil
}

// putObject stores a schedule file under its hash, unless it is there.
func (d *Daemon) putObject(ctx context.Context, obs jetstream.ObjectStore, o *publish.Object, data []byte) error {
	if info, err := obs.GetInfo(ctx, o.Name); err == nil && info.Size == uint64(len(data)) {
		return nil
	}
	if _, err := obs.PutBytes(ctx, o.Name, data); err != nil {
		return &unavailable{"storing the schedule file: " + err.Error()}
	}
	return nil
}

var errConflict = errors.New("an attribute entry was appended concurrently")

// appendEntry appends e to the log and returns its sequence, and whether
// the log already held an entry with e's message id (pubID, or a random
// one): dup, seq that entry's. A declaration carries the expected last
// sequence of its context's attribute subject (attrSeq, what the model
// validated against): JetStream refuses it if another declaration came
// first (errConflict). A publication whose acknowledgement is lost is
// retried with the same message id, which JetStream deduplicates; where
// the expected-sequence check answers first, the last entry of the subject
// is compared with the id. Without a quorum it gives up after an attempt
// (an unavailable error that says so) rather than wait out ctx.
func (d *Daemon) appendEntry(ctx context.Context, st jetstream.Stream, name string, e *publish.Entry, attrSeq uint64, pubID string) (seq uint64, dup bool, err error) {
	body, err := json.Marshal(e)
	if err != nil {
		return 0, false, err
	}
	id := pubID
	if id == "" {
		var idb [16]byte
		rand.Read(idb[:])
		id = hex.EncodeToString(idb[:])
	}
	subject := Subject(name, e.Kind)
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(id), jetstream.WithExpectStream(StreamName)}
	if e.Kind == api.KindAttr {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(attrSeq))
	}
	retried := false
	for backoff := 20 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ack, err := d.js.PublishMsg(actx, msg, opts...)
		cancel()
		if err == nil {
			return ack.Sequence, ack.Duplicate, nil
		}
		var apiErr *jetstream.APIError
		inProcess := errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeDuplicateInProcess
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			if retried {
				gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				last, gerr := st.GetLastMsgForSubject(gctx, subject)
				cancel()
				if gerr == nil && last.Header.Get(jetstream.MsgIDHeader) == id {
					return last.Sequence, false, nil // our first attempt was stored
				}
			}
			return 0, false, errConflict
		}
		if errors.As(err, &apiErr) && !inProcess {
			return 0, false, fmt.Errorf("appending to the log: %w", err)
		}
		// No answer (a leader election, a lost acknowledgement, no quorum),
		// or the first attempt still in process: retry with the same id,
		// unless the cluster lacks a quorum.
		sent := retried || !errors.Is(err, jetstream.ErrNoStreamResponse)
		retried = true
		if up, _ := d.reachable(ctx); up < d.cfg.Replicas/2+1 || ctx.Err() != nil {
			return 0, false, d.noLog(ctx, "appending to the log", err, sent)
		}
		select {
		case <-ctx.Done():
			return 0, false, d.noLog(ctx, "appending to the log", err, sent)
		case <-time.After(backoff):
		}
	}
}

// jsErrCodeDuplicateInProcess is JetStream's JSStreamDuplicateMessageConflict
// (error code 10158, "duplicate message id is in process"): an earlier
// attempt with the same message id is not yet stored.
const jsErrCodeDuplicateInProcess = 10158
