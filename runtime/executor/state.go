package executor

// The executor's explicit state machine. docs/executor.md renders Table as
// its transition table, and the tests exercise every row (see
// TestEveryTransition).

// State is a state of the walk from a request to its launch.
type State uint8

const (
	Start     State = iota // check the executor is usable
	L0Lookup               // is the communicator's L0 (scratch, control words, semaphore pool) materialised?
	L0Setup                // allocate and exchange L0
	L1Lookup               // is (schedule, root rotation) materialised?
	L1Cold                 // materialise it from nothing
	L1Migrate              // materialise it as a delta of a materialised schedule
	L1Switch               // make it the running schedule (rebase shared semaphores)
	L2Lookup               // are our allocations exported, and do the peers that reach them see where the buffers lie?
	L2Setup                // export or stage them, and push where they lie to the peers
	L3Lookup               // is this request shape prepared?
	L3Setup                // resolve the launch arguments and prepare the backend
	Grow                   // grow the shared scratch buffer
	Launch                 // enqueue the launch
	Done                   // the request is launched
	Fail                   // the request failed (the error is returned)
	numStates
)

var stateNames = [numStates]string{"Start", "L0Lookup", "L0Setup", "L1Lookup", "L1Cold", "L1Migrate", "L1Switch",
	"L2Lookup", "L2Setup", "L3Lookup", "L3Setup", "Grow", "Launch", "Done", "Fail"}

// P2P names the point-to-point engine in an *Error (p2p.go): its calls do
// not walk this table.
const P2P = numStates

func (s State) String() string {
	if s == P2P {
		return "P2P"
	}
	if s < numStates {
		return stateNames[s]
	}
	return "State(?)"
}

// Event is the condition that selects a transition.
type Event uint8

const (
	EvOK       Event = iota // the state's work succeeded
	EvHit                   // the level's entry exists
	EvSame                  // L1: the entry is the one the previous launch ran
	EvMiss                  // the level's entry does not exist
	EvSource                // L1 miss with a materialised migration source
	EvNoSource              // L1 miss with none
	EvSkip                  // L2: the schedule reaches no peer user buffer
	EvTooSmall              // L3: the scratch buffer is too small for the request
	EvCapture               // a miss while the stream is being captured
	EvError                 // the state's work failed
	EvBroken                // the executor failed earlier or is closed
	numEvents
)

var eventNames = [numEvents]string{"ok", "hit", "same", "miss", "source", "no-source", "skip", "too-small", "capture", "error", "broken"}

func (e Event) String() string {
	if e < numEvents {
		return eventNames[e]
	}
	return "Event(?)"
}

// Transition is one row of the state machine: in state From, event Event
// leads to state To.
type Transition struct {
	From  State
	Event Event
	To    State
	// Action is what the transition does, as docs/executor.md lists it.
	Action string
}

// Table is the complete transition table. next() is its lookup; a step that
// produces an event with no row is an internal error.
var Table = []Transition{
	{Start, EvOK, L0Lookup, "—"},
	{Start, EvBroken, Fail, "return the sticky error (an earlier failure, Abort or Close)"},
	{L0Lookup, EvHit, L1Lookup, "—"},
	{L0Lookup, EvMiss, L0Setup, "—"},
	{L0Lookup, EvCapture, Fail, "refuse: setup during graph capture"},
	{L0Setup, EvOK, L1Lookup, "scratch (THESEUS_INITIAL_SCRATCH_SIZE), control words and semaphore pool allocated and exported; one allgather of sizes and handles (sizes must be identical); peers imported"},
	{L0Setup, EvError, Fail, "sticky error (sizes differ, allocation or exchange failed)"},
	{L1Lookup, EvSame, L2Lookup, "—"},
	{L1Lookup, EvHit, L1Switch, "—"},
	{L1Lookup, EvSource, L1Migrate, "—"},
	{L1Lookup, EvNoSource, L1Cold, "—"},
	{L1Lookup, EvCapture, Fail, "refuse: materialisation during graph capture"},
	{L1Cold, EvOK, L1Switch, "table uploaded; every channel end gets a new semaphore slot; slots exchanged point to point with each peer"},
	{L1Cold, EvError, Fail, "error, sticky when an allocation or exchange failed (not for a schedule of the wrong size)"},
	{L1Migrate, EvOK, L1Switch, "compiler/diff SemaphoreReuse: shared ends keep their slots, only added ends get new slots and are exchanged"},
	{L1Migrate, EvError, Fail, "sticky error"},
	{L1Switch, EvOK, L2Lookup, "semaphores whose init differs are rebased (after waiting for this communicator's in-flight launches)"},
	{L1Switch, EvCapture, Fail, "refuse: a rebase during graph capture"},
	{L1Switch, EvError, Fail, "sticky error"},
	{L2Lookup, EvSkip, L3Lookup, "nothing: the schedule reaches no peer's input or output"},
	{L2Lookup, EvHit, L3Lookup, "—"},
	{L2Lookup, EvMiss, L2Setup, "—"},
	{L2Lookup, EvCapture, Fail, "refuse: a new export during graph capture (a push alone is allowed)"},
	{L2Setup, EvOK, L3Lookup, "our allocations exported when new (foreign memory staged); where the request's buffers lie pushed to the peers whose view of them differs (their service goroutines import, repoint their prepared launches and answer)"},
	{L2Setup, EvError, Fail, "sticky error (an export failed, or a peer did not take the push within the timeout)"},
	{L3Lookup, EvHit, Launch, "—"},
	{L3Lookup, EvMiss, L3Setup, "— (also during graph capture: L3 setup makes no call capture forbids)"},
	{L3Setup, EvOK, Launch, "the shape met before at other buffers (a schedule reaching no peer's buffers): its entry rebased to these (device.Rebaser: no allocation, copy or wait); else layout, slices and launch arguments resolved (peers' buffers where they last pushed them) and backend Prepare"},
	{L3Setup, EvTooSmall, Grow, "—"},
	{L3Setup, EvError, Fail, "error: not sticky (a bad request, or a backend's refusal)"},
	{Grow, EvOK, L3Setup, "wait for in-flight launches; new scratch exported; one allgather; peers re-imported; every L3 entry dropped"},
	{Grow, EvCapture, Fail, "refuse: scratch reallocation during graph capture"},
	{Grow, EvError, Fail, "sticky error"},
	{Launch, EvOK, Done, "launch counter + 1; fenced when the scratch shape differs from the previous launch's, and for LL schedules that are not self-fenced"},
	{Launch, EvError, Fail, "error from the stream"},
}

var nextTab [numStates][numEvents]State

func init() {
	for i := range nextTab {
		for j := range nextTab[i] {
			nextTab[i][j] = numStates
		}
	}
	for _, t := range Table {
		if nextTab[t.From][t.Event] != numStates {
			panic("executor: duplicate transition " + t.From.String() + " " + t.Event.String())
		}
		nextTab[t.From][t.Event] = t.To
	}
}

// next returns the state that event ev leads to from s, or numStates.
func next(s State, ev Event) State { return nextTab[s][ev] }
