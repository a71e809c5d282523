package mscclpp

import (
	"sort"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// chanKey is a v0.7 channel key (src buffer, dst buffer, type); v0.8+
// channels have only a type (src = dst = 0).
type chanKey struct {
	src, dst ir.BufKind
	t        int // typeIndex
}

// chanDecl is one channel a rank declares: one entry of a connectedTo /
// connected_to list.
type chanDecl struct {
	key  chanKey
	peer int
	pos  ir.Pos
}

// rankChans holds a rank's channels: MSCCL++'s per-type flat lists (the
// index a plan's cids/channel_ids resolve to) and the IR channel each flat
// entry became.
type rankChans struct {
	own   [2][]chanDecl // per type: memory, port
	byKey map[chanKey][]int
	irIdx [2][]int // per type: flat index -> IR channel index
	chans []ir.Channel
	// firstMem maps a peer to the rank's first memory channel to it
	// (built on first use, after pairing).
	firstMem map[int]int
}

// declare adds a channel of rank r.
func (p *parser) declare(r int, d chanDecl) bool {
	p.nchans++
	if p.nchans > MaxChannels {
		if !p.stop {
			p.errorAt(diag.TooLarge, d.pos, subj{r, -1, -1}, "", "more than %d channels", MaxChannels)
		}
		p.stop = true
		return false
	}
	rc := &p.rc[r]
	if rc.byKey == nil {
		rc.byKey = map[chanKey][]int{}
	}
	rc.byKey[d.key] = append(rc.byKey[d.key], len(rc.own[d.key.t]))
	rc.own[d.key.t] = append(rc.own[d.key.t], d)
	return true
}

// buildChannels turns the declarations into paired IR channel ends the
// way the MSCCL++ executor connects them. The executor builds one
// semaphore per declared channel, memory channels first and port channels
// second, each in the order of the plan's channel list expanded by
// connectedTo; when rank A lists fewer channels of a type towards B than B
// lists towards A, A builds the missing ones too, after its own ("unpaired"
// channels). Semaphore setup is first-in-first-out per peer, so the k-th
// channel of a type from A to B is connected to the k-th of that type from
// B to A. The v0.7 buffer key does not take part in the pairing.
//
// The IR list of a rank is: its memory channels in flat order, its filled
// memory channels, its port channels in flat order, its filled port
// channels. Channel ends start at semaphore value 0.
func (p *parser) buildChannels() {
	n := p.n
	// count[t][r] maps peer -> channels of type t from r to that peer.
	var count [2][]map[int]int
	for t := 0; t < 2; t++ {
		count[t] = make([]map[int]int, n)
		for r := 0; r < n; r++ {
			count[t][r] = map[int]int{}
			for _, d := range p.rc[r].own[t] {
				count[t][r][d.peer]++
			}
		}
	}
	// toward[t][r] lists the peers q that declare channels of type t
	// towards r, in increasing order (MSCCL++ fills peers in that order).
	var toward [2][][]int
	for t := 0; t < 2; t++ {
		toward[t] = make([][]int, n)
		for q := 0; q < n; q++ {
			for r := range count[t][q] {
				if r >= 0 && r < n && r != q {
					toward[t][r] = append(toward[t][r], q)
				}
			}
		}
		for r := range toward[t] {
			sort.Ints(toward[t][r])
		}
	}
	for r := 0; r < n; r++ {
		rc := &p.rc[r]
		for t := 0; t < 2; t++ {
			rc.irIdx[t] = make([]int, len(rc.own[t]))
			for k, d := range rc.own[t] {
				rc.irIdx[t][k] = len(rc.chans)
				rc.chans = append(rc.chans, ir.Channel{Peer: d.peer, PeerChannel: -1, Type: irType(t), Pos: d.pos})
			}
			// Filled (unpaired) channels, peers in increasing order as
			// MSCCL++ builds them.
			for _, q := range toward[t][r] {
				theirs := count[t][q][r]
				for k := count[t][r][q]; k < theirs; k++ {
					p.nchans++
					if p.nchans > MaxChannels {
						p.errorAt(diag.TooLarge, p.ranks[r].Pos, subj{r, -1, -1}, "", "more than %d channels", MaxChannels)
						p.stop = true
						return
					}
					rc.chans = append(rc.chans, ir.Channel{Peer: q, PeerChannel: -1, Type: irType(t), Pos: p.ranks[r].Pos})
				}
			}
		}
	}
	// Pair the k-th end of each type from r to q with the k-th from q to r.
	lists := make([]map[[2]int][]int, n) // rank -> (peer, type) -> IR indices in order
	for r := 0; r < n; r++ {
		lists[r] = map[[2]int][]int{}
		for c, ch := range p.rc[r].chans {
			k := [2]int{ch.Peer, int(ch.Type)}
			lists[r][k] = append(lists[r][k], c)
		}
	}
	for r := 0; r < n; r++ {
		for k, mine := range lists[r] {
			q := k[0]
			if q <= r || q >= n {
				continue
			}
			theirs := lists[q][[2]int{r, k[1]}]
			for i := 0; i < len(mine) && i < len(theirs); i++ {
				p.rc[r].chans[mine[i]].PeerChannel = theirs[i]
				p.rc[q].chans[theirs[i]].PeerChannel = mine[i]
			}
		}
	}
}

// irChan returns the IR channel of rank r's flat channel k of type t.
func (p *parser) irChan(r, t, k int) int { return p.rc[r].irIdx[t][k] }

// addDataChannel adds a memory channel pair between ranks r and q, for a
// v0.8+ remote buffer that rank r reaches through its memory-channel
// pointer table although none of its memory channels connects to q.
func (p *parser) addDataChannel(r, q int, pos ir.Pos, s subj) (int, bool) {
	if c, ok := p.synth[[2]int{r, q}]; ok {
		return c, true
	}
	p.nchans += 2
	if p.nchans > MaxChannels {
		if !p.stop {
			p.errorAt(diag.TooLarge, pos, s, "", "more than %d channels", MaxChannels)
		}
		p.stop = true
		return 0, false
	}
	if p.synth == nil {
		p.synth = map[[2]int]int{}
	}
	a, b := len(p.rc[r].chans), len(p.rc[q].chans)
	p.rc[r].chans = append(p.rc[r].chans, ir.Channel{Peer: q, PeerChannel: b, Type: ir.MemoryChannel, Pos: pos})
	p.rc[q].chans = append(p.rc[q].chans, ir.Channel{Peer: r, PeerChannel: a, Type: ir.MemoryChannel, Pos: pos})
	p.synth[[2]int{r, q}] = a
	p.noteAt(diag.ImportNote, pos, s, "",
		"rank %d reaches a buffer of rank %d through memory-mapped pointers without a memory channel to it: added channel %d (data only)", r, q, a)
	return a, true
}
