package theseus

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/comm"
	"github.com/theseus-ccl/theseus/runtime/env"
)

// LaunchInfo says how a process launched by mpirun, torchrun or a job
// script finds its communicator: its rank, the world size, and how rank 0
// hands the unique id to the others — a root address that rank 0 serves the
// id on (RootAddr), or a file it writes the id to (IDFile).
type LaunchInfo struct {
	Rank, WorldSize int
	// RootAddr is host:port. Rank 0 listens there and gives the unique id
	// to every rank that connects; the others connect, retrying until the
	// timeout. Like torchrun's MASTER_ADDR:MASTER_PORT.
	RootAddr string
	// IDFile is a path on a file system every rank sees. Rank 0 writes the
	// id there (hex, atomically); the others wait for it. Use a fresh path
	// per job: a stale file from an earlier job names a dead root.
	IDFile string
}

// LaunchInfoFromEnv reads the launcher's variables: the rank and world size
// from RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK/_SIZE (Open MPI),
// PMI_RANK/PMI_SIZE (MPICH, Intel MPI) or SLURM_PROCID/SLURM_NTASKS, in
// that order; the root address from MASTER_ADDR and MASTER_PORT. These are
// the launchers' conventions, not Theseus variables, and this is the one
// place that reads them. IDFile is left for the caller (a flag). Errors: no
// rank and size, or malformed numbers.
func LaunchInfoFromEnv() (LaunchInfo, error) {
	var li LaunchInfo
	pairs := [][2]string{{"RANK", "WORLD_SIZE"}, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
		{"PMI_RANK", "PMI_SIZE"}, {"SLURM_PROCID", "SLURM_NTASKS"}}
	found := false
	for _, p := range pairs {
		rs, ok1 := os.LookupEnv(p[0])
		ws, ok2 := os.LookupEnv(p[1])
		if !ok1 || !ok2 {
			continue
		}
		r, err1 := strconv.Atoi(strings.TrimSpace(rs))
		w, err2 := strconv.Atoi(strings.TrimSpace(ws))
		if err1 != nil || err2 != nil {
			return li, fmt.Errorf("theseus: %s=%q %s=%q: not numbers", p[0], rs, p[1], ws)
		}
		li.Rank, li.WorldSize, found = r, w, true
		break
	}
	if !found {
		return li, errors.New("theseus: no launcher rank (RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK/_SIZE, PMI_RANK/PMI_SIZE or SLURM_PROCID/SLURM_NTASKS)")
	}
	if a, ok := os.LookupEnv("MASTER_ADDR"); ok {
		port := os.Getenv("MASTER_PORT")
		if port == "" {
			port = "29500"
		}
		li.RootAddr = net.JoinHostPort(a, port)
	}
	return li, nil
}

// Join creates this process's rank of the communicator li describes: rank
// 0 makes the unique id and hands it out through li.RootAddr or li.IDFile,
// then every rank calls NewComm. Errors: li without a rank, size or
// rendezvous; a rendezvous that does not complete within the timeout
// (cfg.Options.Timeout, else THESEUS_TIMEOUT); NewComm's errors.
func Join(ctx context.Context, li LaunchInfo, cfg Config) (*Comm, error) {
	if li.WorldSize < 1 || li.Rank < 0 || li.Rank >= li.WorldSize {
		return nil, &Error{Code: InvalidArgument, Op: "join", Rank: li.Rank, Msg: fmt.Sprintf("rank %d of %d", li.Rank, li.WorldSize)}
	}
	if li.RootAddr == "" && li.IDFile == "" && li.WorldSize > 1 {
		return nil, &Error{Code: InvalidArgument, Op: "join", Rank: li.Rank, Msg: "no root address or unique-id file"}
	}
	// The configuration first: every rank has the same environment, so a
	// bad variable fails every rank here, naming it (after the rendezvous
	// rank 0 would fail alone and stop serving the id, and the others wait
	// for it until THESEUS_TIMEOUT).
	cc, err := cfg.comm()
	if err == nil {
		err = comm.CheckConfig(cc)
	}
	if err != nil {
		return nil, &Error{Code: InvalidArgument, Op: "init", Rank: li.Rank, Msg: "configuration", Err: err}
	}
	timeout := cfg.Options.Timeout
	if timeout <= 0 {
		timeout = env.TimeoutOrDefault()
	}
	var id UniqueID
	var stop func()
	switch {
	case li.Rank == 0:
		opts := bootstrap.Options{Timeout: timeout}
		if isLoopback(li.RootAddr) {
			id, err = bootstrap.NewLoopbackUniqueID(opts)
		} else {
			id, err = bootstrap.NewUniqueID(opts)
		}
		if err == nil && li.WorldSize > 1 {
			if li.IDFile != "" {
				err = writeIDFile(li.IDFile, id)
			} else {
				stop, err = serveID(li.RootAddr, id)
			}
		}
	case li.IDFile != "":
		id, err = readIDFile(ctx, li.IDFile, timeout)
	default:
		id, err = fetchID(ctx, li.RootAddr, timeout)
	}
	if err != nil {
		return nil, &Error{Code: SystemError, Op: "join", Rank: li.Rank, Msg: "unique-id rendezvous", Err: err}
	}
	c, err := initComm(ctx, id, li.Rank, li.WorldSize, cc)
	if stop != nil {
		stop()
	}
	return c, err
}

func isLoopback(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func writeIDFile(path string, id UniqueID) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".theseus-id-*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(hex.EncodeToString(id[:]) + "\n"); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func decodeID(s string) (UniqueID, error) {
	var id UniqueID
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("not a %d-byte hex unique id", len(id))
	}
	copy(id[:], b)
	if _, err := id.Addr(); err != nil {
		return id, err
	}
	return id, nil
}

func readIDFile(ctx context.Context, path string, timeout time.Duration) (UniqueID, error) {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			return decodeID(string(b))
		}
		if !errors.Is(err, os.ErrNotExist) {
			return UniqueID{}, err
		}
		if time.Now().After(deadline) {
			return UniqueID{}, fmt.Errorf("rank 0 wrote no unique id to %s within %v", path, timeout)
		}
		select {
		case <-ctx.Done():
			return UniqueID{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// serveID listens on addr and writes the id (hex and a newline) to every
// connection until stop is called.
func serveID(addr string, id UniqueID) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on root address %s: %w", addr, err)
	}
	msg := []byte(hex.EncodeToString(id[:]) + "\n")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			c.Write(msg)
			c.Close()
		}
	}()
	return func() { ln.Close(); <-done }, nil
}

func fetchID(ctx context.Context, addr string, timeout time.Duration) (UniqueID, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		d := net.Dialer{Timeout: time.Until(deadline)}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.SetReadDeadline(deadline)
			b, err := io.ReadAll(io.LimitReader(c, 1024))
			c.Close()
			if err == nil {
				return decodeID(string(b))
			}
			last = err
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return UniqueID{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return UniqueID{}, fmt.Errorf("no unique id from rank 0 at %s within %v: %v", addr, timeout, last)
}
