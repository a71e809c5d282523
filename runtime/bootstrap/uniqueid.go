// Package bootstrap joins the ranks of a communicator over TCP and gives
// them small-message collectives: allgather, barrier, broadcast, send/recv
// and a MIN-allreduce (the selection-consistency agreement). Every wait is
// bounded; a timeout or a lost peer is an error naming the ranks concerned.
//
// A 128-byte UniqueID (NCCL's ncclUniqueId size) carries the root's address
// (IPv4 or IPv6, honouring MSCCLPP_SOCKET_IFNAME and MSCCLPP_SOCKET_FAMILY)
// and a random nonce that keeps communicators from different ids apart.
package bootstrap

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/theseus-ccl/theseus/runtime/env"
)

// UniqueIDBytes is the size of a UniqueID (NCCL_UNIQUE_ID_BYTES).
const UniqueIDBytes = 128

// UniqueID is the opaque 128-byte communicator id, passed by value.
// Layout (little-endian): magic "THSBOOT1" [0:8], address family 4 or 6
// [8], reserved [9:10], port [10:12], address [12:28] (IPv4 in the first 4
// bytes), nonce [28:44], zero padding.
type UniqueID [UniqueIDBytes]byte

var idMagic = [8]byte{'T', 'H', 'S', 'B', 'O', 'O', 'T', '1'}

// ErrBadID is returned for an id that was not made by NewUniqueID.
var ErrBadID = errors.New("bootstrap: not a Theseus unique id")

func encodeID(ap netip.AddrPort, nonce [16]byte) UniqueID {
	var id UniqueID
	copy(id[0:8], idMagic[:])
	a := ap.Addr()
	if a.Is4() {
		id[8] = 4
		b := a.As4()
		copy(id[12:16], b[:])
	} else {
		id[8] = 6
		b := a.As16()
		copy(id[12:28], b[:])
	}
	binary.LittleEndian.PutUint16(id[10:12], ap.Port())
	copy(id[28:44], nonce[:])
	return id
}

// Addr returns the root address the id carries.
func (id UniqueID) Addr() (netip.AddrPort, error) {
	if [8]byte(id[0:8]) != idMagic {
		return netip.AddrPort{}, ErrBadID
	}
	port := binary.LittleEndian.Uint16(id[10:12])
	switch id[8] {
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(id[12:16])), port), nil
	case 6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(id[12:28])), port), nil
	}
	return netip.AddrPort{}, ErrBadID
}

// Nonce returns the id's random nonce.
func (id UniqueID) Nonce() [16]byte { return [16]byte(id[28:44]) }

func newNonce() ([16]byte, error) {
	var n [16]byte
	_, err := rand.Read(n[:])
	return n, err
}

// localAddr picks the address to listen on: the first address of
// MSCCLPP_SOCKET_IFNAME if set, else the first up, non-loopback interface
// address, else loopback; restricted to MSCCLPP_SOCKET_FAMILY if set.
func localAddr() (netip.Addr, error) {
	fam, err := env.SocketFamily.Enum()
	if err != nil {
		return netip.Addr{}, err
	}
	want := func(a netip.Addr) bool {
		switch fam {
		case "AF_INET":
			return a.Is4()
		case "AF_INET6":
			return a.Is6() && !a.Is4In6()
		}
		return true
	}
	ifname := strings.TrimSpace(env.SocketIfname.String())
	ifs, err := net.Interfaces()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bootstrap: list interfaces: %w", err)
	}
	var fallback netip.Addr
	for _, ifc := range ifs {
		if ifname != "" && !strings.HasPrefix(ifc.Name, ifname) {
			continue
		}
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			pfx, err := netip.ParsePrefix(a.String())
			if err != nil {
				continue
			}
			ad := pfx.Addr().Unmap()
			if !want(ad) || ad.IsLinkLocalUnicast() {
				continue
			}
			if ifname != "" || !ad.IsLoopback() {
				return ad, nil
			}
			if !fallback.IsValid() {
				fallback = ad
			}
		}
	}
	if ifname != "" {
		return netip.Addr{}, fmt.Errorf("bootstrap: MSCCLPP_SOCKET_IFNAME=%s matches no usable interface", ifname)
	}
	if fallback.IsValid() {
		return fallback, nil
	}
	if fam == "AF_INET6" {
		return netip.IPv6Loopback(), nil
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1}), nil
}
