package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/log"
)

// NoColor is the color of a rank that joins no new communicator in Split
// (NCCL_SPLIT_NOCOLOR).
const NoColor = -1

// Split creates a new communicator from the ranks of c that pass the same
// color (ncclCommSplit): every rank of c calls it. Ranks with color NoColor
// (any negative color) take part but get nil. In each new communicator the
// ranks are ordered by key, then by their rank in c. The new communicator
// inherits c's configuration (backend, device, context, sizes) and has its
// own bootstrap, selector and executor.
//
// Errors (*Error): ErrState on a finalized (InvalidUsage), destroyed or
// aborted (InvalidArgument) communicator; RemoteError naming ranks that do not take part within the
// timeout; Init's errors for the new communicator.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	c.replaySync()
	if e, bad := c.stateErr("split"); bad && commState(c.state.Load()) != revoked {
		return nil, e
	}
	if color < 0 {
		color = NoColor
	}
	var msg [16]byte
	binary.LittleEndian.PutUint64(msg[0:], uint64(int64(color)))
	binary.LittleEndian.PutUint64(msg[8:], uint64(int64(key)))
	all, err := c.boot.AllGather(ctx, msg[:])
	if err != nil {
		return nil, c.wrap("split", err)
	}
	type member struct{ color, key, rank int }
	var group []member
	for r, m := range all {
		if len(m) != 16 {
			return nil, &Error{Code: InternalError, Op: "split", Rank: c.rank, Peers: []int{r}, Msg: "malformed split message"}
		}
		mc := int(int64(binary.LittleEndian.Uint64(m)))
		if mc == color && color != NoColor {
			group = append(group, member{mc, int(int64(binary.LittleEndian.Uint64(m[8:]))), r})
		}
	}
	sort.SliceStable(group, func(i, j int) bool {
		if group[i].key != group[j].key {
			return group[i].key < group[j].key
		}
		return group[i].rank < group[j].rank
	})
	// The first member of each group makes the new unique id; a second
	// allgather carries it to the others.
	var idMsg []byte
	if len(group) > 0 && group[0].rank == c.rank {
		id, err := c.newID()
		if err != nil {
			return nil, &Error{Code: SystemError, Op: "split", Rank: c.rank, Msg: "unique id", Err: err}
		}
		idMsg = id[:]
	}
	ids, err := c.boot.AllGather(ctx, idMsg)
	if err != nil {
		return nil, c.wrap("split", err)
	}
	if color == NoColor {
		return nil, nil
	}
	newRank := -1
	for i, m := range group {
		if m.rank == c.rank {
			newRank = i
		}
	}
	lead := ids[group[0].rank]
	if len(lead) != bootstrap.UniqueIDBytes || newRank < 0 {
		return nil, &Error{Code: InternalError, Op: "split", Rank: c.rank, Peers: []int{group[0].rank}, Msg: fmt.Sprintf("no unique id from the group's first rank (%d bytes)", len(lead))}
	}
	cfg := c.cfg
	return Init(ctx, bootstrap.UniqueID(lead), newRank, len(group), cfg)
}

// shrinkTag is the tag of Shrink's message from the new communicator's
// first rank to the other survivors (plus the parent's shrink count): bit
// 62 keeps it apart from the executor's tags, "SH" from the watchers'.
const shrinkTag = 1<<62 | 0x5348<<32

// Shrink creates a new communicator of the ranks of c that are not in
// exclude, in their order in c (ncclCommShrink, NCCL 2.27 semantics):
// every rank of c that is not excluded calls it with the same list, and the
// excluded ranks do not (they may be dead or hung). The survivors agree
// without the excluded ranks: the first survivor (the lowest rank of c not
// excluded) makes the new communicator's unique id and starts its bootstrap
// root, and sends the id and its exclusion list to every other survivor
// point to point over c's bootstrap, whose connections join every pair of
// ranks directly (no message passes through rank 0, which may be the one
// excluded). The new communicator has its own bootstrap, selector and
// executor, so its selection context is read for its own size and its
// schedules are those of that size.
//
// With abort (NCCL_SHRINK_ABORT), c's pending work is aborted first
// (running launches stop at their next wait, without waiting for a call in
// progress on another goroutine), and c is revoked (Revoke): it remains a
// communicator only for Finalize, Destroy and Abort. Without it
// (NCCL_SHRINK_DEFAULT) every rank of c is alive and c stays usable.
//
// Errors (*Error): InvalidArgument for an excluded rank out of range or
// repeated, or for this rank in exclude; InvalidUsage when survivors pass
// different lists (found by the survivors that compare) and on a finalized,
// destroyed or aborted communicator; RemoteError when the first survivor's
// message does not come within the timeout; Init's errors for the new
// communicator.
func (c *Comm) Shrink(ctx context.Context, exclude []int, abort bool) (*Comm, error) {
	if abort {
		c.revoke("shrink", "aborted by Shrink (NCCL_SHRINK_ABORT)")
	} else {
		c.callMu.Lock()
		c.replaySync()
		e, bad := c.stateErr("shrink")
		c.callMu.Unlock()
		if bad && commState(c.state.Load()) != revoked {
			return nil, e
		}
	}
	if st := commState(c.state.Load()); st != live && st != revoked {
		e, _ := c.stateErr("shrink")
		return nil, e
	}
	excl, err := shrinkList(exclude, c.n)
	if err != nil {
		return nil, &Error{Code: InvalidArgument, Op: "shrink", Rank: c.rank, Msg: err.Error()}
	}
	var survivors []int
	newRank := -1
	for r := range c.n {
		if !slices.Contains(excl, r) {
			if r == c.rank {
				newRank = len(survivors)
			}
			survivors = append(survivors, r)
		}
	}
	if newRank < 0 {
		return nil, &Error{Code: InvalidArgument, Op: "shrink", Rank: c.rank, Msg: fmt.Sprintf("rank %d is in its own exclusion list (excluded ranks do not call Shrink)", c.rank)}
	}
	tag := shrinkTag | c.shrinks.Add(1)
	lead := survivors[0]
	var id bootstrap.UniqueID
	if lead == c.rank {
		if id, err = c.newID(); err != nil {
			return nil, &Error{Code: SystemError, Op: "shrink", Rank: c.rank, Msg: "unique id", Err: err}
		}
		msg := encodeShrink(id, excl)
		for _, q := range survivors[1:] {
			if err := c.boot.Send(q, tag, msg); err != nil {
				return nil, c.wrapErr("shrink", err, false)
			}
		}
	} else {
		m, err := c.boot.Recv(ctx, lead, tag)
		if err != nil {
			return nil, c.wrapErr("shrink", err, false)
		}
		theirs, lexcl, err := decodeShrink(m)
		if err != nil {
			return nil, &Error{Code: InternalError, Op: "shrink", Rank: c.rank, Peers: []int{lead}, Msg: "malformed shrink message", Err: err}
		}
		if !slices.Equal(lexcl, excl) {
			return nil, &Error{Code: InvalidUsage, Op: "shrink", Rank: c.rank, Peers: []int{lead},
				Msg: fmt.Sprintf("rank %d excludes ranks %v, this rank %v: every survivor must pass the same list", lead, lexcl, excl)}
		}
		id = theirs
	}
	if log.On(log.Info, log.Init) {
		log.Infof(log.Init, "comm rank %d/%d: shrink excluding %v (abort %v): rank %d of %d, root at rank %d", c.rank, c.n, excl, abort, newRank, len(survivors), lead)
	}
	return Init(ctx, id, newRank, len(survivors), c.cfg)
}

// newID makes a unique id for a communicator made from c (Split, Shrink):
// on the loopback address when c's own id is, so that such a job never
// touches other interfaces.
func (c *Comm) newID() (bootstrap.UniqueID, error) {
	opts := bootstrap.Options{Timeout: c.cfg.Timeout}
	if ap, err := c.id.Addr(); err == nil && ap.Addr().IsLoopback() {
		return bootstrap.NewLoopbackUniqueID(opts)
	}
	return bootstrap.NewUniqueID(opts)
}

// shrinkList checks an exclusion list against n ranks and returns it
// sorted. Errors: a rank out of range or repeated.
func shrinkList(exclude []int, n int) ([]int, error) {
	out := slices.Clone(exclude)
	slices.Sort(out)
	for i, r := range out {
		if r < 0 || r >= n {
			return nil, fmt.Errorf("excluded rank %d is out of range for %d ranks", r, n)
		}
		if i > 0 && out[i-1] == r {
			return nil, fmt.Errorf("excluded rank %d is listed twice", r)
		}
	}
	return out, nil
}

// The shrink message: the unique id, then u32 n and n u32 excluded ranks
// (sorted).
func encodeShrink(id bootstrap.UniqueID, excl []int) []byte {
	m := append([]byte(nil), id[:]...)
	m = binary.LittleEndian.AppendUint32(m, uint32(len(excl)))
	for _, r := range excl {
		m = binary.LittleEndian.AppendUint32(m, uint32(r))
	}
	return m
}

func decodeShrink(m []byte) (bootstrap.UniqueID, []int, error) {
	var id bootstrap.UniqueID
	if len(m) < len(id)+4 {
		return id, nil, fmt.Errorf("%d bytes", len(m))
	}
	copy(id[:], m)
	m = m[len(id):]
	n := binary.LittleEndian.Uint32(m)
	m = m[4:]
	if uint64(len(m)) != 4*uint64(n) {
		return id, nil, fmt.Errorf("%d excluded ranks in %d bytes", n, len(m))
	}
	excl := make([]int, n)
	for i := range excl {
		excl[i] = int(binary.LittleEndian.Uint32(m[4*i:]))
	}
	return id, excl, nil
}

// Revoke stops the communicator's work without releasing it
// (ncclCommRevoke, NCCL 2.29 semantics): running launches stop at their
// next wait (the abort word), the replay record is poisoned, and from then
// on collectives fail with InvalidUsage (ErrState); the communicator
// remains a parent for Split and Shrink and is released by Finalize,
// Destroy or Abort. It does not wait for a call in progress on another
// goroutine, and does nothing on a communicator that is not live. Safe
// from any goroutine.
func (c *Comm) Revoke() { c.revoke("revoke", "revoked (ncclCommRevoke)") }

func (c *Comm) revoke(op, why string) {
	if !c.state.CompareAndSwap(int32(live), int32(revoked)) {
		return
	}
	c.poisonReplay()
	if c.exec != nil {
		c.exec.Abort(&Error{Code: InvalidUsage, Op: op, Rank: c.rank, Msg: "communicator " + why, Err: ErrState})
	}
	if r := c.replayPoison.Load(); r != nil {
		r.Disarm()
	}
}
