package bootstrap

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/theseus-ccl/theseus/internal/ranks"
	"github.com/theseus-ccl/theseus/runtime/env"
)

// MaxMessage bounds one bootstrap message (bytes). Bootstrap carries ids,
// handles and small tables, never user data.
const MaxMessage = 64 << 20

// Options configure a Bootstrap.
type Options struct {
	// Timeout bounds every wait on a peer. 0 means THESEUS_TIMEOUT (default
	// 60 s).
	Timeout time.Duration
}

func (o Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return env.TimeoutOrDefault()
}

// Error is a bootstrap failure that names the ranks concerned.
type Error struct {
	Rank    int // the rank reporting
	Op      string
	Missing []int // ranks that did not answer or were lost
	Lost    bool  // a connection broke (as opposed to a timeout)
	Err     error
}

func (e *Error) Error() string {
	what := "timed out waiting for"
	if e.Lost {
		what = "lost"
	}
	s := fmt.Sprintf("bootstrap: rank %d: %s: %s rank", e.Rank, e.Op, what)
	if len(e.Missing) != 1 {
		s += "s"
	}
	s += " " + ranks.Format(e.Missing)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// ErrClosed is returned by calls on a closed Bootstrap.
var ErrClosed = errors.New("bootstrap: closed")

// Bootstrap is one rank's endpoint. Its methods are safe for concurrent use,
// but collectives (AllGather, Barrier, Broadcast, AllReduceMin) must be
// called in the same order on every rank.
type Bootstrap struct {
	rank, nranks int
	nonce        [16]byte
	timeout      time.Duration
	ln           net.Listener
	peers        []netip.AddrPort

	mu     sync.Mutex
	out    []net.Conn // out[p]: our connection to p (lazy)
	wmu    []sync.Mutex
	boxes  map[boxKey]chan []byte
	lost   map[int]error // peers whose connection broke
	lostCh chan struct{} // closed and replaced when a peer is lost
	closed bool
	done   chan struct{}
	seq    uint64 // collective sequence number
	seqMu  sync.Mutex
	wg     sync.WaitGroup
}

type boxKey struct {
	from int
	tag  uint64
}

const internal = uint64(1) << 63

// Init joins rank `rank` of `nranks` to the communicator of id. It blocks
// until every rank has registered with the root, or the timeout passes
// (then the error names the ranks the root never heard from). Errors:
// ErrBadID, a mismatched id (different nonce or nranks), *Error.
func Init(ctx context.Context, id UniqueID, rank, nranks int, opts Options) (*Bootstrap, error) {
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("bootstrap: rank %d out of range for %d ranks", rank, nranks)
	}
	root, err := id.Addr()
	if err != nil {
		return nil, err
	}
	b := &Bootstrap{rank: rank, nranks: nranks, nonce: id.Nonce(), timeout: opts.timeout(),
		out: make([]net.Conn, nranks), wmu: make([]sync.Mutex, nranks), boxes: map[boxKey]chan []byte{}, lost: map[int]error{},
		lostCh: make(chan struct{}), done: make(chan struct{})}
	la := root.Addr()
	if !la.IsLoopback() {
		if la, err = localAddr(); err != nil {
			return nil, err
		}
	}
	b.ln, err = net.Listen("tcp", netip.AddrPortFrom(la, 0).String())
	if err != nil {
		return nil, fmt.Errorf("bootstrap: listen: %w", err)
	}
	me, err := netip.ParseAddrPort(b.ln.Addr().String())
	if err != nil {
		b.ln.Close()
		return nil, err
	}
	peers, err := register(ctx, root, b.nonce, rank, nranks, me, b.timeout)
	if err != nil {
		b.ln.Close()
		return nil, err
	}
	b.peers = peers
	b.wg.Add(1)
	go b.acceptLoop()
	return b, nil
}

// Rank is this endpoint's rank.
func (b *Bootstrap) Rank() int { return b.rank }

// NRanks is the communicator size.
func (b *Bootstrap) NRanks() int { return b.nranks }

// Timeout is the bound on every wait.
func (b *Bootstrap) Timeout() time.Duration { return b.timeout }

// register sends our address to the root and receives the address table.
func register(ctx context.Context, root netip.AddrPort, nonce [16]byte, rank, nranks int, me netip.AddrPort, timeout time.Duration) ([]netip.AddrPort, error) {
	deadline := time.Now().Add(timeout)
	var d net.Dialer
	var c net.Conn
	var err error
	for {
		dctx, cancel := context.WithDeadline(ctx, deadline)
		c, err = d.DialContext(dctx, "tcp", root.String())
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, &Error{Rank: rank, Op: "init", Missing: []int{0}, Err: fmt.Errorf("root %s unreachable: %w", root, err)}
		}
		select { // the root may not be listening yet: retry with a short backoff
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer c.Close()
	c.SetDeadline(deadline.Add(timeout / 2)) // the root itself times out first and explains
	msg := encodeHello(nonce, rank, nranks, me.String())
	if err := writeFrame(c, 0, msg); err != nil {
		return nil, &Error{Rank: rank, Op: "init", Missing: []int{0}, Lost: true, Err: err}
	}
	_, reply, err := readFrame(bufio.NewReader(c))
	if err != nil {
		return nil, &Error{Rank: rank, Op: "init", Missing: []int{0}, Lost: true, Err: fmt.Errorf("no reply from root: %w", err)}
	}
	return decodeTable(reply, rank, nranks)
}

func encodeHello(nonce [16]byte, rank, nranks int, addr string) []byte {
	m := make([]byte, 0, 32+len(addr))
	m = append(m, idMagic[:]...)
	m = append(m, nonce[:]...)
	m = binary.LittleEndian.AppendUint32(m, uint32(rank))
	m = binary.LittleEndian.AppendUint32(m, uint32(nranks))
	return append(m, addr...)
}

func decodeHello(m []byte) (nonce [16]byte, rank, nranks int, addr string, err error) {
	if len(m) < 32 || [8]byte(m[0:8]) != idMagic {
		return nonce, 0, 0, "", errors.New("bad hello")
	}
	nonce = [16]byte(m[8:24])
	return nonce, int(binary.LittleEndian.Uint32(m[24:28])), int(binary.LittleEndian.Uint32(m[28:32])), string(m[32:]), nil
}

// Table replies: "OK" + n address strings separated by '\n', or "ER" + text.
func decodeTable(m []byte, rank, nranks int) ([]netip.AddrPort, error) {
	if len(m) >= 2 && string(m[:2]) == "ER" {
		return nil, parseRootError(string(m[2:]), rank)
	}
	if len(m) < 2 || string(m[:2]) != "OK" {
		return nil, fmt.Errorf("bootstrap: rank %d: malformed reply from root", rank)
	}
	parts := strings.Split(string(m[2:]), "\n")
	if len(parts) != nranks {
		return nil, fmt.Errorf("bootstrap: rank %d: root sent %d addresses for %d ranks", rank, len(parts), nranks)
	}
	out := make([]netip.AddrPort, nranks)
	for i, p := range parts {
		a, err := netip.ParseAddrPort(p)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: rank %d: bad address of rank %d: %w", rank, i, err)
		}
		out[i] = a
	}
	return out, nil
}

// parseRootError rebuilds an *Error from the root's "missing:1,2;text".
func parseRootError(s string, rank int) error {
	var missing []int
	if rest, ok := strings.CutPrefix(s, "missing:"); ok {
		list, text, _ := strings.Cut(rest, ";")
		for _, f := range strings.Split(list, ",") {
			var r int
			if _, err := fmt.Sscan(f, &r); err == nil {
				missing = append(missing, r)
			}
		}
		return &Error{Rank: rank, Op: "init", Missing: missing, Err: errors.New(text)}
	}
	return fmt.Errorf("bootstrap: rank %d: root refused: %s", rank, s)
}

func writeFrame(w io.Writer, tag uint64, data []byte) error {
	var h [12]byte
	binary.LittleEndian.PutUint64(h[0:8], tag)
	binary.LittleEndian.PutUint32(h[8:12], uint32(len(data)))
	if _, err := w.Write(append(h[:], data...)); err != nil {
		return err
	}
	return nil
}

func readFrame(r *bufio.Reader) (uint64, []byte, error) {
	var h [12]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(h[8:12])
	if n > MaxMessage {
		return 0, nil, fmt.Errorf("frame of %d bytes over the %d-byte limit", n, MaxMessage)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(r, data); err != nil {
		return 0, nil, err
	}
	return binary.LittleEndian.Uint64(h[0:8]), data, nil
}

const byeTag = internal | 0xFFFF_FFFF_FFFF

// acceptLoop receives connections from peers; each starts with a hello.
func (b *Bootstrap) acceptLoop() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go b.readLoop(c)
	}
}

func (b *Bootstrap) readLoop(c net.Conn) {
	defer b.wg.Done()
	defer c.Close()
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(b.timeout))
	_, hello, err := readFrame(r)
	if err != nil {
		return
	}
	nonce, from, nranks, _, err := decodeHello(hello)
	if err != nil || nonce != b.nonce || nranks != b.nranks || from < 0 || from >= b.nranks {
		return // a stray or mismatched connection: ignore it
	}
	c.SetReadDeadline(time.Time{})
	go func() { <-b.done; c.Close() }()
	for {
		tag, data, err := readFrame(r)
		if err != nil {
			b.markLost(from, err)
			return
		}
		if tag == byeTag {
			return
		}
		b.box(from, tag) <- data
	}
}

func (b *Bootstrap) markLost(p int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if _, ok := b.lost[p]; !ok {
		b.lost[p] = err
		close(b.lostCh)
		b.lostCh = make(chan struct{})
	}
}

func (b *Bootstrap) box(from int, tag uint64) chan []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := boxKey{from, tag}
	ch, ok := b.boxes[k]
	if !ok {
		ch = make(chan []byte, 16)
		b.boxes[k] = ch
	}
	return ch
}

// forget drops the box of (from, tag) if it is still ch and empty.
func (b *Bootstrap) forget(from int, tag uint64, ch chan []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := boxKey{from, tag}
	if b.boxes[k] == ch && len(ch) == 0 {
		delete(b.boxes, k)
	}
}

func (b *Bootstrap) conn(p int) (net.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if c := b.out[p]; c != nil {
		return c, nil
	}
	c, err := net.DialTimeout("tcp", b.peers[p].String(), b.timeout)
	if err != nil {
		return nil, &Error{Rank: b.rank, Op: "connect", Missing: []int{p}, Lost: true, Err: err}
	}
	if err := writeFrame(c, 0, encodeHello(b.nonce, b.rank, b.nranks, "")); err != nil {
		c.Close()
		return nil, &Error{Rank: b.rank, Op: "connect", Missing: []int{p}, Lost: true, Err: err}
	}
	b.out[p] = c
	return c, nil
}

func (b *Bootstrap) send(p int, tag uint64, data []byte, op string) error {
	if p < 0 || p >= b.nranks {
		return fmt.Errorf("bootstrap: peer %d out of range", p)
	}
	if len(data) > MaxMessage {
		return fmt.Errorf("bootstrap: message of %d bytes over the %d-byte limit", len(data), MaxMessage)
	}
	if p == b.rank {
		b.box(p, tag) <- append([]byte(nil), data...)
		return nil
	}
	c, err := b.conn(p)
	if err != nil {
		return err
	}
	b.wmu[p].Lock() // serialise writers on one connection
	c.SetWriteDeadline(time.Now().Add(b.timeout))
	err = writeFrame(c, tag, data)
	b.wmu[p].Unlock()
	if err != nil {
		return &Error{Rank: b.rank, Op: op, Missing: []int{p}, Lost: true, Err: err}
	}
	return nil
}

func (b *Bootstrap) recv(ctx context.Context, p int, tag uint64, deadline time.Time, op string) ([]byte, error) {
	ch := b.box(p, tag)
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	if tag&internal != 0 {
		// An internal tag (nextTag) carries one message per peer: its box
		// is dropped once that message is taken, or every collective round
		// would leave one behind.
		defer b.forget(p, tag, ch)
	}
	for {
		b.mu.Lock()
		lerr, isLost := b.lost[p]
		lostCh := b.lostCh
		closed := b.closed
		b.mu.Unlock()
		select { // a message that arrived before the loss still counts
		case m := <-ch:
			return m, nil
		default:
		}
		if closed {
			return nil, ErrClosed
		}
		if isLost {
			return nil, &Error{Rank: b.rank, Op: op, Missing: []int{p}, Lost: true, Err: lerr}
		}
		select {
		case m := <-ch:
			return m, nil
		case <-lostCh:
		case <-t.C:
			return nil, &Error{Rank: b.rank, Op: op, Missing: []int{p}}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-b.done:
			return nil, ErrClosed
		}
	}
}

// Send sends a small message to peer with a user tag (< 2^63).
func (b *Bootstrap) Send(peer int, tag uint64, data []byte) error {
	if tag&internal != 0 {
		return fmt.Errorf("bootstrap: tag %#x reserved", tag)
	}
	return b.send(peer, tag, data, "send")
}

// Recv receives the next message from peer with tag, waiting at most the
// timeout.
func (b *Bootstrap) Recv(ctx context.Context, peer int, tag uint64) ([]byte, error) {
	if tag&internal != 0 {
		return nil, fmt.Errorf("bootstrap: tag %#x reserved", tag)
	}
	if peer < 0 || peer >= b.nranks {
		return nil, fmt.Errorf("bootstrap: peer %d out of range", peer)
	}
	return b.recv(ctx, peer, tag, time.Now().Add(b.timeout), "recv")
}

// TryRecv returns the next message from peer with tag if one has arrived,
// without waiting: ok is false when none has (or the tag is reserved, the
// peer out of range, or the endpoint closed).
func (b *Bootstrap) TryRecv(peer int, tag uint64) (data []byte, ok bool) {
	if tag&internal != 0 || peer < 0 || peer >= b.nranks {
		return nil, false
	}
	b.mu.Lock()
	ch, have := b.boxes[boxKey{peer, tag}]
	closed := b.closed
	b.mu.Unlock()
	if !have || closed {
		return nil, false
	}
	select {
	case m := <-ch:
		return m, true
	default:
		return nil, false
	}
}

func (b *Bootstrap) nextTag(kind uint64) uint64 {
	b.seqMu.Lock()
	b.seq++
	s := b.seq
	b.seqMu.Unlock()
	return internal | s<<8 | kind
}

// AllGather gathers every rank's data, indexed by rank. Rank 0 collects and
// redistributes; when ranks are missing it tells the others which, so every
// rank's error names them.
func (b *Bootstrap) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	tag := b.nextTag(1)
	n := b.nranks
	out := make([][]byte, n)
	if b.rank != 0 {
		if err := b.send(0, tag, data, "allgather"); err != nil {
			return nil, err
		}
		m, err := b.recv(ctx, 0, tag|2, time.Now().Add(2*b.timeout), "allgather")
		if err != nil {
			return nil, err
		}
		return decodeGathered(m, b.rank, n)
	}
	out[0] = append([]byte(nil), data...)
	deadline := time.Now().Add(b.timeout)
	var missing []int
	var lostAny bool
	var ferr error
	for p := 1; p < n; p++ {
		m, err := b.recv(ctx, p, tag, deadline, "allgather")
		if err != nil {
			var be *Error
			if !errors.As(err, &be) {
				return nil, err
			}
			missing = append(missing, p)
			lostAny = lostAny || be.Lost
			ferr = be.Err
			continue
		}
		out[p] = m
	}
	reply := encodeGathered(out, missing)
	for p := 1; p < n; p++ {
		if !slices.Contains(missing, p) {
			b.send(p, tag|2, reply, "allgather") // best effort: a failure shows up on that rank
		}
	}
	if len(missing) > 0 {
		return nil, &Error{Rank: 0, Op: "allgather", Missing: missing, Lost: lostAny, Err: ferr}
	}
	return out, nil
}

// gathered message: u32 nmissing, missing ranks, then n length-prefixed items.
func encodeGathered(items [][]byte, missing []int) []byte {
	var m []byte
	m = binary.LittleEndian.AppendUint32(m, uint32(len(missing)))
	for _, r := range missing {
		m = binary.LittleEndian.AppendUint32(m, uint32(r))
	}
	if len(missing) > 0 {
		return m
	}
	for _, it := range items {
		m = binary.LittleEndian.AppendUint32(m, uint32(len(it)))
		m = append(m, it...)
	}
	return m
}

func decodeGathered(m []byte, rank, n int) ([][]byte, error) {
	bad := fmt.Errorf("bootstrap: rank %d: malformed allgather reply", rank)
	if len(m) < 4 {
		return nil, bad
	}
	nm := int(binary.LittleEndian.Uint32(m))
	m = m[4:]
	if nm > 0 {
		if len(m) < 4*nm {
			return nil, bad
		}
		miss := make([]int, nm)
		for i := range miss {
			miss[i] = int(binary.LittleEndian.Uint32(m[4*i:]))
		}
		return nil, &Error{Rank: rank, Op: "allgather", Missing: miss, Err: errors.New("reported by rank 0")}
	}
	out := make([][]byte, n)
	for i := range out {
		if len(m) < 4 {
			return nil, bad
		}
		l := int(binary.LittleEndian.Uint32(m))
		m = m[4:]
		if l > len(m) {
			return nil, bad
		}
		out[i] = m[:l:l]
		m = m[l:]
	}
	return out, nil
}

// Barrier returns once every rank has entered it.
func (b *Bootstrap) Barrier(ctx context.Context) error {
	_, err := b.AllGather(ctx, nil)
	return err
}

// Broadcast returns root's data on every rank.
func (b *Bootstrap) Broadcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	if root < 0 || root >= b.nranks {
		return nil, fmt.Errorf("bootstrap: root %d out of range", root)
	}
	tag := b.nextTag(3)
	if b.rank == root {
		for p := 0; p < b.nranks; p++ {
			if p != root {
				if err := b.send(p, tag, data, "broadcast"); err != nil {
					return nil, err
				}
			}
		}
		return append([]byte(nil), data...), nil
	}
	return b.recv(ctx, root, tag, time.Now().Add(b.timeout), "broadcast")
}

// AllReduceMin returns the element-wise minimum of every rank's vals (all
// ranks must pass the same length). It is the agreement primitive of the
// selection-consistency protocol.
func (b *Bootstrap) AllReduceMin(ctx context.Context, vals []int64) ([]int64, error) {
	buf := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(buf[8*i:], uint64(v))
	}
	all, err := b.AllGather(ctx, buf)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(vals)
	for r, m := range all {
		if len(m) != len(buf) {
			return nil, fmt.Errorf("bootstrap: rank %d contributed %d values to AllReduceMin, want %d", r, len(m)/8, len(vals))
		}
		for i := range out {
			out[i] = min(out[i], int64(binary.LittleEndian.Uint64(m[8*i:])))
		}
	}
	return out, nil
}

// Close says goodbye to connected peers and releases the endpoint. It does
// not wait for peers.
func (b *Bootstrap) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	conns := slices.Clone(b.out)
	b.mu.Unlock()
	for _, c := range conns {
		if c != nil {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			writeFrame(c, byeTag, nil)
			c.Close()
		}
	}
	close(b.done)
	b.ln.Close()
	b.wg.Wait()
	return nil
}

// Abort closes every connection without goodbye, so peers see this rank as
// lost (ncclCommAbort semantics).
func (b *Bootstrap) Abort() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	conns := slices.Clone(b.out)
	b.mu.Unlock()
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	close(b.done)
	b.ln.Close()
	b.wg.Wait()
}
