package cuda

import (
	"testing"

	"github.com/theseus-ccl/theseus/runtime/resident"
)

// TestQueueLayout: the persistent executor's queue as the kernel sees it
// (kernel/queue.h) is runtime/resident's layout (no GPU needed).
func TestQueueLayout(t *testing.T) {
	c := queueCLayout()
	for name, want := range map[string]uintptr{
		"state": resident.OffState, "completed": resident.OffCompleted, "issued": resident.OffIssued,
		"exit": resident.OffExit, "aborted": resident.OffAborted, "starts": resident.OffStarts,
		"blocks": resident.OffBlocks, "smid": resident.OffSMs, "status": resident.StatusBytes, "maxblocks": resident.MaxBlocks,
		"arg": resident.SlotArg, "launch": resident.SlotLaunch, "nfence": resident.SlotNFence,
		"seq": resident.SlotSeq, "grid": resident.SlotGrid, "flags": resident.SlotFlags, "slot": resident.SlotBytes,
		"in": resident.SlotIn, "out": resident.SlotOut,
		"stopped": resident.Stopped, "running": resident.Running, "exiting": resident.Exiting,
	} {
		if c[name] != want {
			t.Errorf("%s: C %d, Go %d", name, c[name], want)
		}
	}
}
