package executor

import (
	"encoding/binary"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
)

type l1Key struct {
	sched int
	shift int
}

type endRes struct {
	slot        *slot
	peerInbound device.Ptr
	peer        int // physical
	init        int64
	// port is the connection of an end to a peer on another node, and
	// portChan its channel there (port.go); nil for a mapped end.
	port     *portPeer
	portChan uint16
	lane     int
}

type l1Entry struct {
	key     l1Key
	sched   *Schedule
	logical int
	table   *optable.Table
	// fenceAll: every launch is fenced (an LL table not marked
	// self-fenced, or one the verifier found racing between iterations;
	// enqueue).
	fenceAll bool
	tabMem   device.Mem
	publish  device.Mem
	ends     []endRes
	// Scratch chunks of the largest rank: the scratch need is a pure
	// function of the schedule and the request, identical on every rank.
	maxScratch int64
	// L2: exportTo[q] are the buffers peer q reaches of ours, importFrom[q]
	// those of q we reach (bit 0 input, bit 1 output).
	needL2     bool
	exportTo   []uint8
	importFrom []uint8
	l2         map[l2Key]*l2Entry
	l3         map[l3Key]*l3Entry // when !needL2
	// mirror marks the scratch chunks that peers on other nodes put into,
	// on the staged path (port.go, mirrorMap); nil otherwise.
	mirror       []uint32
	mirrorChunks int64
	// kick are the proxy connections a launch of the entry wakes first
	// (device producers only: Go producers wake the proxy as they post).
	kick []*portConn
	// kernels are the table's specialised kernels by datatype, read from
	// the bundle at the first L3 setup of each (nil: none).
	kernels map[ir.DataType]*device.Kernel
}

func (e *Executor) shiftOf(w *walk) int {
	m := w.s.Bundle.Meta
	if !m.Collective.Rooted() {
		return 0
	}
	pl := ir.Placement{Collective: m.Collective, NRanks: m.NRanks, ProgRoot: m.Root, Root: w.r.Root}
	return pl.Shift()
}

func (e *Executor) l1Lookup(w *walk) Event {
	w.shift = e.shiftOf(w)
	key := l1Key{w.s.ID, w.shift}
	if l := e.lastL1; l != nil && l.key == key && l.sched == w.s { // the running schedule
		w.l1 = l
		e.stats.L1Same++
		return EvSame
	}
	if l := e.l1[key]; l != nil && l.sched == w.s {
		w.l1 = l
		e.stats.L1Hits++
		return EvHit
	}
	if w.st.Capturing() {
		return EvCapture
	}
	if e.source(w) != nil {
		return EvSource
	}
	return EvNoSource
}

// source is the delta-migration source for w's schedule: the schedule it
// replaces when that is materialised under the same root rotation, else
// the communicator's previous schedule under the same rotation.
func (e *Executor) source(w *walk) *l1Entry {
	if e.cfg.NoMigration {
		return nil
	}
	if r := w.s.Replaces; r >= 0 {
		if l := e.l1[l1Key{r, w.shift}]; l != nil && l.sched.Bundle.Meta.NRanks == e.n {
			return l
		}
	}
	if l := e.lastL1; l != nil && l.key.shift == w.shift && l.sched.Bundle.Meta.NRanks == e.n {
		return l
	}
	return nil
}

// l1Switch makes w.l1 the running schedule (lastL1): semaphores it shares
// with the schedule that last used them, under a different init, are
// rebased by their owner (ir.md §5.3: the expected counter moves by the
// init difference) once this rank's launches are quiescent. From then on
// the plans of every other schedule wait for a walk (Plan).
func (e *Executor) l1Switch(w *walk) Event {
	e.stats.Switches++
	var todo []int
	for c := range w.l1.ends {
		if er := &w.l1.ends[c]; er.slot.curInit != er.init {
			todo = append(todo, c)
		}
	}
	if len(todo) == 0 {
		e.lastL1 = w.l1
		return EvOK
	}
	if w.st.Capturing() {
		return EvCapture
	}
	if err := e.waitInflight(); err != nil {
		return e.fail(w, L1Switch, err, true)
	}
	var buf [8]byte
	for _, c := range todo {
		er := &w.l1.ends[c]
		if er.slot.pool.port {
			w := er.slot.pool.word(int(er.slot.expected() - er.slot.pool.base))
			*w += uint64(er.slot.curInit - er.init)
			er.slot.curInit = er.init
			e.stats.Rebases++
			continue
		}
		if err := e.dev.Download(buf[:], er.slot.expected()); err != nil {
			return e.fail(w, L1Switch, err, true)
		}
		v := binary.LittleEndian.Uint64(buf[:]) + uint64(er.slot.curInit-er.init)
		binary.LittleEndian.PutUint64(buf[:], v)
		if err := e.dev.Upload(er.slot.expected(), buf[:]); err != nil {
			return e.fail(w, L1Switch, err, true)
		}
		er.slot.curInit = er.init
		e.stats.Rebases++
	}
	e.lastL1 = w.l1
	return EvOK
}
