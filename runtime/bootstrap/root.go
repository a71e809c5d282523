package bootstrap

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// NewUniqueID makes an id and starts its root: a goroutine listening on
// the address the id carries, which collects the n registrations of the
// ranks, sends every rank the address table, and exits. When ranks are
// missing after the timeout, it answers the ranks that did register with
// the list of missing ranks. It is what ncclGetUniqueId starts.
func NewUniqueID(opts Options) (UniqueID, error) {
	la, err := localAddr()
	if err != nil {
		return UniqueID{}, err
	}
	return newUniqueIDOn(la, opts)
}

// NewLoopbackUniqueID is NewUniqueID on the loopback address (tests and
// single-node runs that must not touch other interfaces).
func NewLoopbackUniqueID(opts Options) (UniqueID, error) {
	return newUniqueIDOn(netip.AddrFrom4([4]byte{127, 0, 0, 1}), opts)
}

func newUniqueIDOn(la netip.Addr, opts Options) (UniqueID, error) {
	nonce, err := newNonce()
	if err != nil {
		return UniqueID{}, err
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(la, 0).String())
	if err != nil {
		return UniqueID{}, fmt.Errorf("bootstrap: root listen: %w", err)
	}
	ap, err := netip.ParseAddrPort(ln.Addr().String())
	if err != nil {
		ln.Close()
		return UniqueID{}, err
	}
	go runRoot(ln, nonce, opts.timeout())
	return encodeID(ap, nonce), nil
}

type registration struct {
	conn   net.Conn
	rank   int
	nranks int
	addr   string
}

func runRoot(ln net.Listener, nonce [16]byte, timeout time.Duration) {
	defer ln.Close()
	regs := make(chan registration)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				c.SetReadDeadline(time.Now().Add(timeout))
				_, m, err := readFrame(bufio.NewReader(c))
				if err != nil {
					c.Close()
					return
				}
				n, rank, nranks, addr, err := decodeHello(m)
				if err != nil || n != nonce {
					writeFrame(c, 0, []byte("ERmismatched unique id: this id was made by another ncclGetUniqueId"))
					c.Close()
					return
				}
				select {
				case regs <- registration{c, rank, nranks, addr}:
				case <-ctx.Done():
					c.Close()
				}
			}(c)
		}
	}()
	var byRank map[int]registration
	nranks := -1
	// Until the first registration, the root lives 10 timeouts (ranks may
	// start late); after it, every rank must register within one timeout.
	timer := time.After(10 * timeout)
	refuse := func(r registration, why string) {
		writeFrame(r.conn, 0, []byte("ER"+why))
		r.conn.Close()
	}
	for {
		select {
		case r := <-regs:
			if nranks < 0 {
				nranks = r.nranks
				byRank = map[int]registration{}
				timer = time.After(timeout)
			}
			switch {
			case r.nranks != nranks:
				refuse(r, fmt.Sprintf("rank %d says nranks=%d but rank(s) before it said %d", r.rank, r.nranks, nranks))
				continue
			case r.rank < 0 || r.rank >= nranks:
				refuse(r, fmt.Sprintf("rank %d out of range for %d ranks", r.rank, nranks))
				continue
			}
			if _, dup := byRank[r.rank]; dup {
				refuse(r, fmt.Sprintf("rank %d registered twice", r.rank))
				continue
			}
			byRank[r.rank] = r
			if len(byRank) == nranks {
				addrs := make([]string, nranks)
				for i := range addrs {
					addrs[i] = byRank[i].addr
				}
				reply := []byte("OK" + strings.Join(addrs, "\n"))
				for _, x := range byRank {
					x.conn.SetWriteDeadline(time.Now().Add(timeout))
					writeFrame(x.conn, 0, reply)
					x.conn.Close()
				}
				return
			}
		case <-timer:
			if nranks < 0 {
				return
			}
			var missing []string
			for i := 0; i < nranks; i++ {
				if _, ok := byRank[i]; !ok {
					missing = append(missing, fmt.Sprint(i))
				}
			}
			why := "missing:" + strings.Join(missing, ",") + ";never registered with the root"
			for _, x := range byRank {
				refuse(x, why)
			}
			return
		}
	}
}
