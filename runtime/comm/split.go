package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/theseus-ccl/theseus/runtime/bootstrap"
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
	if e, bad := c.stateErr("split"); bad {
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
		var id bootstrap.UniqueID
		opts := bootstrap.Options{Timeout: c.cfg.Timeout}
		if ap, err := c.id.Addr(); err == nil && ap.Addr().IsLoopback() {
			id, err = bootstrap.NewLoopbackUniqueID(opts)
			if err != nil {
				return nil, &Error{Code: SystemError, Op: "split", Rank: c.rank, Msg: "unique id", Err: err}
			}
		} else if id, err = bootstrap.NewUniqueID(opts); err != nil {
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
