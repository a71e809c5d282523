// Package selector picks, for every collective request, the schedule to
// run: Theseus's flexible selection (F1) and consistency (F2) features
// (seed README, "Theseus Core APIs"; ARCHITECTURE.md §5).
//
// A Selector belongs to one communicator. It reads the selection context
// directory (THESEUS_SELECTION_CONTEXT, docs/selection-context.md) as it
// grows, and answers Select(request) with the id of the best usable
// schedule — its entry position in the schedule manifest — or None:
//
//   - a schedule matches when its collective, nranks, nlocalranks, message-size
//     window and in-place/out-of-place support admit the request;
//   - it is usable when its usability expression is true;
//   - among usable schedules the highest preference wins, and a tie goes to
//     the latest added (the highest id). A replaced schedule stays
//     selectable, so selection returns to it when it outscores its
//     replacement again.
//
// Consistency: every rank must select the same schedule for every request.
// Selection is a pure function of the request and an agreed snapshot of the
// context. At the first request and every THESEUS_CONTEXT_CHECK_PERIOD
// requests after it (an epoch), the ranks agree on the snapshot with one
// MIN-allreduce (Agreement) over the visible prefix lengths of every
// append-only file and over their clocks, whose minimum is the cut used for
// valid_after. All ranks issue a communicator's collectives in the same
// order, so they switch snapshots at the same request. Two more agreement
// steps exist, both taken by all ranks at the same request: when a schedule
// is first selected its file is loaded and verified on every rank, and the
// outcome is agreed; and when a candidate's policy reads a rank-local
// attribute (request.sendbuf/recvbuf), the candidates' usability and
// preference values are agreed for that request.
//
// Results are cached per endogenous request tuple within a snapshot, so a
// repeated request costs a hash lookup.
//
// A Selector is not safe for concurrent use: like NCCL's, a communicator's
// calls are serialised by the caller.
package selector

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"time"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/env"
	rlog "github.com/theseus-ccl/theseus/runtime/log"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
	"github.com/theseus-ccl/theseus/runtime/selector/vm"
)

// None is what Select returns when no schedule matches or none is usable.
const None = -1

// AttrWindow is how many attribute-manifest entries past the previously
// agreed prefix one epoch can admit (their value-log prefixes travel in the
// same allreduce; docs/selection-context.md, "Agreement vector").
const AttrWindow = 64

// Request is one collective request, as the NCCL API received it.
type Request struct {
	Coll       ir.Collective
	SendBuf    uintptr // address; rank-local
	RecvBuf    uintptr // address; rank-local
	Count      int64   // the NCCL count argument, in elements
	DataType   ir.DataType
	RedOp      ir.RedOp
	PacketType ir.PacketType
	// Root is the root rank of rooted collectives, -1 otherwise.
	Root        int
	NRanks      int
	NLocalRanks int
	// InPlace says whether the buffers overlap as NCCL defines in-place for
	// this collective (ir.Placement); the caller works it out.
	InPlace bool
}

// Logger receives the selector's messages. Warnf is for problems users must
// fix (bad manifest lines, schedules that fail to load); Infof for state
// changes (a new snapshot, a schedule loaded).
type Logger interface {
	Warnf(format string, args ...any)
	Infof(format string, args ...any)
}

// ncclLog writes NCCL-style lines through runtime/log under SELECTOR.
type ncclLog struct{}

func (ncclLog) Warnf(format string, args ...any) { rlog.Warnf(rlog.Selector, format, args...) }
func (ncclLog) Infof(format string, args ...any) { rlog.Infof(rlog.Selector, format, args...) }

// Options configure a Selector. Zero fields take the documented defaults.
type Options struct {
	// Dir is the selection context directory (required; runtime/ctxdir
	// resolves the default one).
	Dir string
	// CheckPeriod is K: an epoch starts at the first request and every K
	// requests. Default: THESEUS_CONTEXT_CHECK_PERIOD (1000).
	CheckPeriod int
	// VectorMaxLen bounds vector values. Default:
	// THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH (1024).
	VectorMaxLen int
	// Agreement is the communicator's MIN-allreduce. Default: Solo.
	Agreement Agreement
	// Timeout bounds each agreement step. Default: THESEUS_TIMEOUT (60 s).
	Timeout time.Duration
	// Loader loads and verifies schedule files. Default: none, and every
	// schedule then fails to load (with a logged reason).
	Loader ScheduleLoader
	// Clock reads this rank's clock for the valid_after cut. Default:
	// time.Now.
	Clock func() time.Time
	// Location interprets valid_after timestamps without a zone (its
	// standard offset). Default: time.Local.
	Location *time.Location
	// Logger receives messages. Default: runtime/log, subsystem SELECTOR.
	Logger Logger
	// CacheEntries caps the request cache; it is cleared when full.
	// Default 4096.
	CacheEntries int
	// Rank is this rank of the communicator (0..nranks-1), given to a
	// RankLoader, which then reads, checks and builds only what this rank
	// runs. Default 0.
	Rank int
}

func (o *Options) fill() error {
	if o.Dir == "" {
		return errors.New("selector: no selection context directory (Options.Dir)")
	}
	if o.CheckPeriod == 0 {
		n, err := env.CheckPeriod.Int()
		if err != nil {
			return err
		}
		o.CheckPeriod = int(n)
	}
	if o.CheckPeriod < 1 {
		return fmt.Errorf("selector: check period %d < 1", o.CheckPeriod)
	}
	if o.VectorMaxLen == 0 {
		n, err := env.VectorMaxLen.Int()
		if err != nil {
			return err
		}
		o.VectorMaxLen = int(n)
	}
	if o.VectorMaxLen < 0 || o.VectorMaxLen > bc.MaxVectorLen {
		return fmt.Errorf("selector: vector max length %d outside [0, %d]", o.VectorMaxLen, bc.MaxVectorLen)
	}
	if o.Timeout == 0 {
		ms, err := env.Timeout.Int()
		if err != nil {
			return err
		}
		o.Timeout = env.TimeoutDuration(ms)
	}
	if o.Agreement == nil {
		o.Agreement = Solo{}
	}
	if o.Loader == nil {
		o.Loader = noLoader{}
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Location == nil {
		o.Location = time.Local
	}
	if o.Logger == nil {
		o.Logger = ncclLog{}
	}
	if o.CacheEntries <= 0 {
		o.CacheEntries = 4096
	}
	return nil
}

// Key is the endogenous request tuple the cache is indexed by — every
// request field except the rank-local buffer addresses — packed
// injectively into two words, so that the map hashes 16 contiguous bytes.
// KeyOf computes it.
type Key struct {
	count uint64
	rest  uint64 // root+1:17 | nranks:17 | nlocal:17 | coll:4 | dtype:4 | redop:3 | packet:1 | inplace:1
}

// KeyOf packs r into its cache key; ok is false for a request outside
// the ranges the packing (and validation) admits, which then takes
// Select's slow path and its error (ErrBadRequest).
func KeyOf(r *Request) (k Key, ok bool) {
	if uint(r.Root+1) > ir.MaxRanks || uint(r.NRanks) > ir.MaxRanks || uint(r.NLocalRanks) > ir.MaxRanks ||
		r.Coll >= ir.NumCollectives || r.DataType >= ir.NumDataTypes || r.RedOp >= ir.NumRedOps || r.PacketType > ir.LL8 {
		return Key{}, false
	}
	rest := uint64(r.Root+1) | uint64(r.NRanks)<<17 | uint64(r.NLocalRanks)<<34 | uint64(r.Coll)<<51 |
		uint64(r.DataType)<<55 | uint64(r.RedOp)<<59 | uint64(r.PacketType)<<62
	if r.InPlace {
		rest |= 1 << 63
	}
	return Key{uint64(r.Count), rest}, true
}

// Cache values besides schedule ids.
const (
	cacheNone  = int32(None)
	cacheAgree = int32(-2) // a candidate is rank-local: agree every time
)

// Selector selects schedules for one communicator.
type Selector struct {
	opt   Options
	rd    *reader
	snap  *snapshot
	cache map[Key]int32
	// last is the last request answered from the cache and its answer:
	// a repeated request skips the hash (cleared with the cache). With
	// untilEpoch and the counters, all a repeated request touches, in one
	// place (before the VM's stack).
	last struct {
		k  Key
		id int32
		ok bool
	}
	untilEpoch int
	stats      Stats
	vm         vm.VM
	cacheGen   uint64 // CacheGen

	clockLast int64
	agreed    agreedPrefix
	agreeBuf  []int64
	// pendW is the attribute window of the epoch agreement this rank did
	// not wait for (0: none pending; settle collects it).
	pendW int
	// proven is the reader's change count and the load count when the
	// installed snapshot was last shown to be the agreed prefix's (built
	// from it, or stable); with neither changed since, it still is.
	proven struct {
		changes, loads uint64
		ok             bool
	}
	hiBuf agreedPrefix // stable's scratch
	early []int64      // the result of a round of an Agreement that is not Pipelined
}

// Stats counts what a Selector did.
type Stats struct {
	Requests   uint64 // Select calls that returned without error
	Hits       uint64 // answered from the cache
	Epochs     uint64 // snapshot agreements
	Pipelined  uint64 // epochs whose agreement this rank did not wait for (it could not change the snapshot)
	Snapshots  uint64 // epochs whose snapshot differed from the previous one
	Agreements uint64 // agreement steps of any kind
	Loads      uint64 // schedule load steps
	// EpochTime is the wall time spent in epochs: reading the context,
	// the agreement (what this rank waited for included), installing.
	EpochTime time.Duration
}

// New returns a Selector reading opt.Dir. Nothing is read until the first
// request. Errors: invalid options or environment values.
func New(opt Options) (*Selector, error) {
	if err := opt.fill(); err != nil {
		return nil, err
	}
	mopt := manifest.Options{MaxVectorLen: opt.VectorMaxLen, Location: opt.Location}
	s := &Selector{
		opt:   opt,
		rd:    newReader(opt.Dir, mopt, opt.Logger),
		cache: make(map[Key]int32),
	}
	return s, nil
}

// Close releases the open context files.
func (s *Selector) Close() error {
	s.rd.close()
	return nil
}

// Stats returns the counters.
func (s *Selector) Stats() Stats { return s.stats }

// Dir is the context directory this selector reads.
func (s *Selector) Dir() string { return s.opt.Dir }

// Agreed returns the agreed prefixes of the two manifests, in entries
// (lines): what the last epoch whose agreement this rank has collected
// admitted on every rank (a pipelined epoch's result, which cannot change
// the snapshot, is collected at the next epoch); both 0 before the first
// request, and while the context directory is missing or empty.
func (s *Selector) Agreed() (attributes, schedules int) { return s.agreed.attrs, s.agreed.scheds }

// ErrBadRequest is wrapped by Select's errors for requests outside the
// enums' ranges or with impossible sizes.
var ErrBadRequest = errors.New("selector: bad request")

// messageBytes validates r and returns its message size (ir.MessageBytes).
func messageBytes(r *Request) (int64, error) {
	switch {
	case r.Coll >= ir.NumCollectives:
		return 0, fmt.Errorf("%w: collective %d", ErrBadRequest, r.Coll)
	case r.DataType >= ir.NumDataTypes:
		return 0, fmt.Errorf("%w: datatype %d", ErrBadRequest, r.DataType)
	case r.RedOp >= ir.NumRedOps:
		return 0, fmt.Errorf("%w: redop %d", ErrBadRequest, r.RedOp)
	case r.PacketType > ir.LL8:
		return 0, fmt.Errorf("%w: packet type %d", ErrBadRequest, r.PacketType)
	case r.NRanks < 1 || r.NRanks > ir.MaxRanks:
		return 0, fmt.Errorf("%w: nranks %d", ErrBadRequest, r.NRanks)
	case r.NLocalRanks < 0 || r.NLocalRanks > r.NRanks:
		return 0, fmt.Errorf("%w: nlocalranks %d of %d ranks", ErrBadRequest, r.NLocalRanks, r.NRanks)
	case r.Root < -1 || r.Root >= r.NRanks:
		return 0, fmt.Errorf("%w: root %d of %d ranks", ErrBadRequest, r.Root, r.NRanks)
	}
	m, err := ir.MessageBytes(r.Coll, r.NRanks, r.Count, r.DataType)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return m, nil
}

// fillReq writes the twelve request fields (bytecode.ReqField order).
func fillReq(q *[bc.NumReqFields]int64, r *Request, msg int64) {
	q[bc.ReqColl] = int64(r.Coll)
	q[bc.ReqSendBuf] = int64(r.SendBuf)
	q[bc.ReqRecvBuf] = int64(r.RecvBuf)
	q[bc.ReqCount] = r.Count
	q[bc.ReqDataType] = int64(r.DataType)
	q[bc.ReqDataTypeSize] = int64(r.DataType.Size())
	q[bc.ReqRedOp] = int64(r.RedOp)
	q[bc.ReqPacketType] = int64(r.PacketType)
	q[bc.ReqRoot] = int64(r.Root)
	q[bc.ReqNLocalRanks] = int64(r.NLocalRanks)
	q[bc.ReqNRanks] = int64(r.NRanks)
	q[bc.ReqMessageSize] = msg
}

// Select returns the id of the schedule to run for r, or None. It is a
// collective call in the NCCL sense: every rank of the communicator must
// call it for the same requests in the same order, since epochs, loads and
// rank-local policies take agreement steps. Errors: ErrBadRequest (wrapped)
// for an invalid request; an agreement failure or timeout (the
// communicator should then be aborted). Select allocates nothing when it
// answers from the cache.
func (s *Selector) Select(ctx context.Context, r *Request) (int, error) {
	if s.untilEpoch == 0 {
		t0 := time.Now()
		err := s.epoch(ctx)
		s.stats.EpochTime += time.Since(t0)
		if err != nil {
			return None, err
		}
		s.untilEpoch = s.opt.CheckPeriod
	}
	k, valid := KeyOf(r)
	if s.last.ok && valid && s.last.k == k {
		return s.repeat(), nil
	}
	if id, ok := s.cache[k]; ok && valid && id != cacheAgree {
		s.last.k, s.last.id, s.last.ok = k, id, true
		s.untilEpoch--
		s.stats.Requests++
		s.stats.Hits++
		return int(id), nil
	}
	id, agree, err := s.choose(ctx, r, nil)
	if err != nil {
		return None, err
	}
	if !valid { // choose validates more strictly than KeyOf
		return None, fmt.Errorf("%w: fields out of range", ErrBadRequest)
	}
	if len(s.cache) >= s.opt.CacheEntries {
		s.clearCache()
	}
	if agree {
		s.cache[k] = cacheAgree
	} else {
		s.cache[k] = int32(id)
	}
	s.untilEpoch--
	s.stats.Requests++
	return id, nil
}

// Budget is the number of requests Select answers before its next epoch
// (0: an epoch is due, and the next request must go to Select, which
// agrees on the snapshot with the other ranks there). A caller that
// serves repeated requests from launch plans (runtime/comm) serves at most
// this many, counts them with Served, and sends the next to Select: every
// rank then runs the epoch at the same request.
func (s *Selector) Budget() int { return s.untilEpoch }

// Served counts n requests answered without Select, each with the answer
// Select gave a request of the same key under the current cache
// generation (CacheGen) from its cache (Cached): the plans of repeated
// calls, launched in Go or from C. n beyond Budget is clamped to it.
func (s *Selector) Served(n int) {
	n = min(n, s.untilEpoch)
	if n <= 0 {
		return
	}
	s.untilEpoch -= n
	s.stats.Requests += uint64(n)
	s.stats.Hits += uint64(n)
}

// repeat answers the last cached request again.
func (s *Selector) repeat() int {
	s.untilEpoch--
	s.stats.Requests++
	s.stats.Hits++
	return int(s.last.id)
}

// clearCache empties the request cache.
func (s *Selector) clearCache() {
	clear(s.cache)
	s.last.ok = false
	s.cacheGen++
}

// CacheGen counts the times the request cache was emptied (a new
// snapshot, a full cache): while it is unchanged, Cached answers a key as
// it did.
func (s *Selector) CacheGen() uint64 { return s.cacheGen }

// Cached returns the cached answer for requests with key k, when the
// cache holds one that Select gives without an agreement step.
func (s *Selector) Cached(k Key) (id int, ok bool) {
	v, ok := s.cache[k]
	if !ok || v == cacheAgree {
		return None, false
	}
	return int(v), true
}

// verdict is one candidate's evaluation.
type verdict struct {
	matched bool
	usable  bool
	key     int64 // orderKey of the preference (fromKey inverts it)
	fault   string
}

// orderKey maps a preference to an int64 with the same order (-0 = +0),
// so that preferences can be compared, and agreed by a MIN-allreduce,
// exactly.
func orderKey(f float64) int64 {
	if f == 0 {
		f = 0
	}
	b := int64(math.Float64bits(f))
	if b < 0 {
		b ^= math.MaxInt64
	}
	return b
}

// evaluate scores candidate c for the request in s.snap.env.
func (s *Selector) evaluate(c *sched) verdict {
	env := &s.snap.env
	u, f := s.vm.Eval(c.usable, env)
	if !f.OK() {
		return verdict{matched: true, fault: s.fault(c, "usable", f, c.usable)}
	}
	if !u.Bool() {
		return verdict{matched: true}
	}
	p, f := s.vm.Eval(c.pref, env)
	if !f.OK() {
		return verdict{matched: true, fault: s.fault(c, "preference", f, c.pref)}
	}
	pv := p.Number()
	if math.IsNaN(pv) {
		return verdict{matched: true, fault: s.fault(c, "preference", vm.Fault{}, c.pref)}
	}
	return verdict{matched: true, usable: true, key: orderKey(pv)}
}

// fault describes an evaluation failure, which makes the candidate unusable
// for the request, and logs it once per schedule and kind.
func (s *Selector) fault(c *sched, what string, f vm.Fault, p *vm.Program) string {
	msg := "is NaN"
	bit := uint8(1 << 7)
	if !f.OK() {
		msg = f.Describe(p)
		bit = 1 << (uint8(f.Code) % 7)
	}
	text := fmt.Sprintf("%s: %s", what, msg)
	if c.faults&bit == 0 {
		c.faults |= bit
		s.opt.Logger.Warnf("schedule %d (%s): %s; the schedule is not usable for such requests", c.id, c.entry.Label(), text)
	}
	return text
}

// choose runs selection for r against the current snapshot, taking the
// agreement steps it needs. If out is not nil it receives every matched
// candidate's verdict, indexed like s.snap.byColl[r.Coll]. agree reports
// that a rank-local candidate matched (the result must not be cached).
func (s *Selector) choose(ctx context.Context, r *Request, out []verdict) (id int, agree bool, err error) {
	msg, err := messageBytes(r)
	if err != nil {
		return None, false, err
	}
	fillReq(&s.snap.env.Req, r, msg)
	cands := s.snap.byColl[r.Coll]
	for {
		var best *sched
		var bestKey int64
		agree = false
		// A load below may narrow a candidate to the file's own constraints,
		// and the next round skips it without a verdict: forget the previous
		// round's verdicts so that none is reported stale.
		clear(out)
		for _, c := range cands {
			if !s.snap.rankLocal[r.Coll] {
				break
			}
			if c.rankLocal && c.ls < lsMissing && c.matches(r, msg) {
				agree = true
				break
			}
		}
		if agree {
			best, err = s.agreeRankLocal(ctx, cands, r, msg, out)
			if err != nil {
				return None, true, err
			}
		} else {
			env := &s.snap.env
			for i, c := range cands {
				if c.ls >= lsMissing || !c.matches(r, msg) {
					continue
				}
				if out == nil { // the fast path; evaluate repeats it with details
					u, fu := s.vm.Eval(c.usable, env)
					if fu.OK() && !u.Bool() {
						continue
					}
					p, fp := s.vm.Eval(c.pref, env)
					if fu.OK() && fp.OK() {
						if pv := p.Number(); pv == pv { // not NaN
							if k := orderKey(pv); best == nil || k >= bestKey {
								best, bestKey = c, k
							}
							continue
						}
					}
				}
				v := s.evaluate(c)
				if out != nil {
					out[i] = v
				}
				if v.usable && (best == nil || v.key >= bestKey) {
					best, bestKey = c, v.key
				}
			}
		}
		if best == nil {
			return None, agree, nil
		}
		if best.loadedFor(r) {
			return best.id, agree, nil
		}
		if err := s.load(ctx, best, r); err != nil {
			return None, agree, err
		}
		// Loading may have narrowed or excluded the winner: select again.
	}
}

// agreeRankLocal evaluates every matched candidate locally and agrees on
// (usable, preference) with one MIN-allreduce: a candidate is usable when
// it is usable on every rank, and its agreed preference is the least over
// the ranks. The winner is then the same everywhere.
func (s *Selector) agreeRankLocal(ctx context.Context, cands []*sched, r *Request, msg int64, out []verdict) (*sched, error) {
	v := s.agreeBuf[:0]
	var idx []int
	for i, c := range cands {
		if c.ls >= lsMissing || !c.matches(r, msg) {
			continue
		}
		vd := s.evaluate(c)
		if out != nil {
			out[i] = vd
		}
		u := int64(0)
		if vd.usable {
			u = 1
		}
		v = append(v, u, vd.key)
		idx = append(idx, i)
	}
	s.agreeBuf = v
	res, err := s.agree(ctx, v)
	if err != nil {
		return nil, err
	}
	var best *sched
	var bestKey int64
	for j, i := range idx {
		u, k := res[2*j], res[2*j+1]
		if out != nil {
			out[i].usable = u == 1
			if u == 1 {
				out[i].key = k
			}
		}
		if u == 1 && (best == nil || k >= bestKey) {
			best, bestKey = cands[i], k
		}
	}
	return best, nil
}

// agree runs one agreement step under the configured timeout.
func (s *Selector) agree(ctx context.Context, v []int64) ([]int64, error) {
	s.stats.Agreements++
	return s.allReduce(ctx, v)
}

// allReduce is one AllReduceMin under the configured timeout.
func (s *Selector) allReduce(ctx context.Context, v []int64) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opt.Timeout)
	defer cancel()
	res, err := s.opt.Agreement.AllReduceMin(ctx, v)
	if err != nil {
		return nil, fmt.Errorf("selector: agreement step: %w", err)
	}
	if len(res) != len(v) {
		return nil, fmt.Errorf("selector: agreement returned %d values for %d", len(res), len(v))
	}
	return res, nil
}

// Load outcomes, ordered so that the MIN over ranks is the worst.
const (
	loadMissing = 0
	loadInvalid = 1
	loadOK      = 2
)

// load loads and verifies c's file on this rank and agrees on the outcome
// with all ranks: loaded only if it loaded everywhere; missing (retried at
// the next epoch) if it was missing anywhere; otherwise excluded for good.
func (s *Selector) load(ctx context.Context, c *sched, r *Request) error {
	s.stats.Loads++
	status, reason := int64(loadOK), ""
	info, err := s.loadOne(c, r)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		status, reason = loadMissing, err.Error()
	case err != nil:
		status, reason = loadInvalid, err.Error()
	case info == nil:
		status, reason = loadInvalid, "the loader returned no schedule"
	case c.entry.Gen != nil:
		// The generator wrote it for the request: nothing to narrow.
	default:
		saved := c.cons
		if why := c.narrow(info); why != "" {
			status, reason = loadInvalid, why
		}
		c.cons = saved // narrowed for real only once agreed
	}
	res, err := s.agree(ctx, []int64{status})
	if err != nil {
		return err
	}
	if reason == "" && res[0] != loadOK {
		reason = "it failed to load on another rank"
	}
	switch {
	case res[0] == loadOK:
		if c.entry.Gen == nil {
			c.narrow(info)
		}
		c.ls, c.info, c.missingLogged = lsLoaded, info, false
		s.opt.Logger.Infof("schedule %d (%s) loaded: %s, %d ranks", c.id, c.entry.Label(), info.Collective, info.NRanks)
	case c.entry.Gen != nil:
		// A generator that fails for one shape may serve others: excluded
		// for this shape only (every rank agreed on the outcome).
		c.failed = append(c.failed, genFailure{n: r.NRanks, l: r.NLocalRanks, why: reason})
		s.opt.Logger.Warnf("schedule %d (%s) excluded for %d ranks (%d per node): %s", c.id, c.entry.Label(), r.NRanks, r.NLocalRanks, reason)
	case res[0] == loadMissing:
		c.ls, c.reason = lsMissing, "schedule file missing: "+reason
		if !c.missingLogged { // retried every epoch: logged once (selection-context.md §8)
			c.missingLogged = true
			s.opt.Logger.Warnf("schedule %d: %s; retried at every epoch until it appears", c.id, c.reason)
		}
	default:
		c.ls, c.reason = lsInvalid, "excluded: "+reason
		s.opt.Logger.Warnf("schedule %d (%s) %s", c.id, c.entry.Label(), c.reason)
	}
	return nil
}

// loadOne loads c for r's shape on this rank: through LoadFor when the
// loader is a RankLoader (which a generated entry needs), else Load. A
// generated entry's channel expression is evaluated here, on the request
// choose filled in.
func (s *Selector) loadOne(c *sched, r *Request) (*ScheduleInfo, error) {
	rl, ranked := s.opt.Loader.(RankLoader)
	req := LoadRequest{Path: c.path, Collective: c.entry.Collective, NRanks: r.NRanks, NLocalRanks: r.NLocalRanks, Rank: s.opt.Rank}
	g := c.entry.Gen
	if g == nil {
		if ranked {
			return rl.LoadFor(req)
		}
		return s.opt.Loader.Load(c.path)
	}
	if !ranked {
		return nil, fmt.Errorf("the schedule loader cannot build generated entries (gen %s)", g.Algorithm)
	}
	k := c.chanK
	if c.chanProg != nil {
		var err error
		if k, err = evalChannels(&s.vm, c.chanProg, &s.snap.env, g.Channels); err != nil {
			return nil, err
		}
	}
	req.Gen = &GenSpec{Algorithm: g.Algorithm, Protocol: g.Protocol, Channels: k, Avoid: g.Avoid,
		NLocalRanks: genLocal(g.Algorithm, r.NRanks, r.NLocalRanks)}
	return rl.LoadFor(req)
}

// ScheduleRef describes a schedule entry for the executor.
type ScheduleRef struct {
	ID int
	// File is the schedule file as resolved against the context directory;
	// for a generated entry, its label (its name, or gen:ALGORITHM).
	File     string
	Replaces int // the id this entry replaces, or -1 (delta migration source)
	Info     *ScheduleInfo
}

// Schedule returns the entry with the given id once it has been loaded
// (every id Select returns has been).
func (s *Selector) Schedule(id int) (ScheduleRef, bool) {
	if id < 0 || id >= len(s.rd.scheds) {
		return ScheduleRef{}, false
	}
	c := s.rd.scheds[id]
	if c.ls != lsLoaded {
		return ScheduleRef{}, false
	}
	return ScheduleRef{ID: id, File: c.path, Replaces: c.entry.Replaces, Info: c.info}, true
}
