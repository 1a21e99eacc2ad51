// Package baseline measures what the hardware, etcd and gRPC do on this
// machine with nothing of meshloc in the way: the baselines every figure
// of meshctl bench is a ratio to, measured in the same run.
package baseline

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshloc/meshloc/pkg/wire"
	rpcpb "github.com/meshloc/meshloc/pkg/wire/meshloc/rpc/v1"
	pb "github.com/meshloc/meshloc/pkg/wire/meshloc/v1"
)

// The baselines are what the hardware, etcd and gRPC can do on this machine
// in this run, with nothing of meshloc in the way.

// CAS is the single-key compare-and-swap baseline: each step compares the
// key's mod revision and puts a new value, one transaction.
type CAS struct {
	c   *clientv3.Client
	key string
	rev int64
	i   int
}

func NewCAS(ctx context.Context, c *clientv3.Client, key string) (*CAS, error) {
	resp, err := c.Put(ctx, key, "0")
	if err != nil {
		return nil, err
	}
	return &CAS{c: c, key: key, rev: resp.Header.Revision}, nil
}

// Step runs one transaction and returns its latency.
func (x *CAS) Step(ctx context.Context) (time.Duration, error) {
	x.i++
	t0 := time.Now()
	tr, err := x.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(x.key), "=", x.rev)).Then(clientv3.OpPut(x.key, fmt.Sprint(x.i))).Commit()
	if err != nil {
		return 0, err
	}
	if !tr.Succeeded {
		return 0, errors.New("bench: CAS baseline lost its own compare")
	}
	x.rev = tr.Header.Revision
	return time.Since(t0), nil
}

// Txn8Serial runs n transactions that compare the mod revisions of 8 keys and
// put all 8 (what a relocation of a group of 7 members writes, roughly).
func Txn8Serial(ctx context.Context, c *clientv3.Client, prefix string, n int) ([]time.Duration, error) {
	keys := make([]string, 8)
	revs := make([]int64, 8)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/%d", prefix, i)
		resp, err := c.Put(ctx, keys[i], "0")
		if err != nil {
			return nil, err
		}
		revs[i] = resp.Header.Revision
	}
	out := make([]time.Duration, 0, n)
	for i := range n {
		cmps := make([]clientv3.Cmp, 8)
		ops := make([]clientv3.Op, 8)
		for j, k := range keys {
			cmps[j] = clientv3.Compare(clientv3.ModRevision(k), "=", revs[j])
			ops[j] = clientv3.OpPut(k, fmt.Sprint(i))
		}
		t0 := time.Now()
		tr, err := c.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return nil, err
		}
		if !tr.Succeeded {
			return nil, errors.New("bench: 8-key baseline lost its own compare")
		}
		out = append(out, time.Since(t0))
		for j := range revs {
			revs[j] = tr.Header.Revision
		}
	}
	return out, nil
}

// CASRate runs clients goroutines, each doing CAS transactions on its own
// key, for d, and returns how many succeeded and how long they took.
func CASRate(ctx context.Context, c *clientv3.Client, prefix string, clients int, d time.Duration) (int64, time.Duration, error) {
	var total atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	start := time.Now()
	deadline := start.Add(d)
	for g := range clients {
		wg.Go(func() {
			key := fmt.Sprintf("%s/%d", prefix, g)
			resp, err := c.Put(ctx, key, "0")
			if err != nil {
				errc <- err
				return
			}
			rev := resp.Header.Revision
			for time.Now().Before(deadline) {
				tr, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, "x")).Commit()
				if err != nil {
					errc <- err
					return
				}
				if !tr.Succeeded {
					errc <- errors.New("bench: CAS rate baseline lost its own compare")
					return
				}
				rev = tr.Header.Revision
				total.Add(1)
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return 0, 0, err
	}
	return total.Load(), time.Since(start), nil
}

// Sink is where a TCP baseline's reader puts the bytes.
type Sink int

const (
	// Discard reads into one small buffer, hot in the processor's cache:
	// the transfer alone.
	Discard Sink = iota
	// Touched reads into a buffer of all the bytes whose pages were
	// written before the transfer: the transfer and the memory's bandwidth.
	Touched
	// Fresh reads into a buffer of all the bytes fresh from the kernel
	// (freshBuffer), faulted in as the bytes land: what a target does with
	// a state that no memory it already holds can take. On a VM the first
	// touch of memory can cost more than the transfer.
	Fresh
)

// TCPThroughput sends total bytes over one loopback TCP connection, in 1 MiB
// writes, to a reader that puts them in into, and returns GiB/s: the limit
// of streaming a state between two processes on this machine. The reader's
// buffer is ready before the clock starts.
func TCPThroughput(total int, into Sink) (float64, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	var dst []byte
	if into != Discard {
		buf, release, err := freshBuffer(total)
		if err != nil {
			return 0, err
		}
		defer release()
		if into == Touched {
			for i := 0; i < len(buf); i += 4096 {
				buf[i] = 1
			}
		}
		dst = buf
	}
	done := make(chan error, 1)
	go func() {
		cn, err := l.Accept()
		if err != nil {
			done <- err
			return
		}
		defer cn.Close()
		if dst == nil {
			n, err := io.Copy(io.Discard, cn)
			if err == nil && n != int64(total) {
				err = fmt.Errorf("received %d of %d bytes", n, total)
			}
			done <- err
			return
		}
		if _, err := io.ReadFull(cn, dst); err != nil {
			done <- fmt.Errorf("received less than %d bytes: %w", total, err)
			return
		}
		done <- nil
	}()
	cn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	for sent := 0; sent < total; sent += len(buf) {
		if _, err := cn.Write(buf[:min(len(buf), total-sent)]); err != nil {
			cn.Close()
			<-done
			return 0, err
		}
	}
	cn.Close()
	if err := <-done; err != nil {
		return 0, fmt.Errorf("bench: TCP baseline: %w", err)
	}
	return gibps(total, time.Since(start)), nil
}

// CRCThroughput returns the GiB/s of CRC32C (Castagnoli, the checksum of
// every STATE chunk and wire message) over size bytes.
func CRCThroughput(size int) float64 {
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i * 13)
	}
	tab := crc32.MakeTable(crc32.Castagnoli)
	start := time.Now()
	s := crc32.Checksum(buf, tab)
	el := time.Since(start)
	_ = s
	return gibps(size, el)
}

func gibps(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds() / (1 << 30)
}

// Watchers are watch streams on their own etcd clients following a
// prefix, as many as the mesh has location caches (each node's and the
// direct client's): what etcd sends after a write of a record. A CAS on a
// key they follow pays that fan-out, which a relocation's commit always
// does and the plain CAS baseline never.
type Watchers struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	clients []*clientv3.Client
}

func StartWatchers(cfg clientv3.Config, prefix string, n int) (*Watchers, error) {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watchers{cancel: cancel}
	for range n {
		c, err := clientv3.New(cfg)
		if err != nil {
			w.Close()
			return nil, err
		}
		w.clients = append(w.clients, c)
		ch := c.Watch(ctx, prefix, clientv3.WithPrefix())
		w.wg.Go(func() {
			for range ch { // each event received and dropped
			}
		})
	}
	return w, nil
}

func (w *Watchers) Close() {
	w.cancel()
	w.wg.Wait()
	for _, c := range w.clients {
		c.Close()
	}
}

// echo is the raw gRPC unary baseline: meshloc's own call service and
// messages over plain gRPC (default codec, default options), answered at once
// with no routing, no object and no etcd.
type echo struct {
	rpcpb.UnimplementedCallServiceServer
}

func (echo) Call(_ context.Context, r *pb.CallRequest) (*pb.CallReply, error) {
	return &pb.CallReply{Code: pb.Code_CODE_OK, Payload: []byte(`{"value":1}`), Fence: &pb.Fence{OwnerId: "echo"}}, nil
}

// RawGRPC is a running echo server and a client connected to it.
type RawGRPC struct {
	srv  *grpc.Server
	conn *grpc.ClientConn
	c    rpcpb.CallServiceClient
}

func StartRawGRPC() (*RawGRPC, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := grpc.NewServer()
	rpcpb.RegisterCallServiceServer(s, echo{})
	go s.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		s.Stop()
		return nil, err
	}
	return &RawGRPC{srv: s, conn: conn, c: rpcpb.NewCallServiceClient(conn)}, nil
}

func (r *RawGRPC) Call(ctx context.Context) error {
	op := wire.NewOperationID()
	_, err := r.c.Call(ctx, &pb.CallRequest{Version: 1, Object: "actor/counter/bench", Method: "add", Args: [][]byte{[]byte("1")}, OperationId: op[:]})
	return err
}

func (r *RawGRPC) Close() {
	r.conn.Close()
	r.srv.Stop()
}

// The "stop, persist, re-activate elsewhere" peer: what users of Akka
// (passivation with persistence) and Dapr (actor state in a state store)
// do to move an object, written with the plain etcd client and as fast as we
// know how. Two in-memory "nodes" own an object in turn through a key bound
// to their etcd lease. One move is: the owner stops serving, persists the
// state (1 MiB chunks, up to 8 puts in flight), and in one transaction that
// compares its ownership writes the state's manifest and releases the
// object; the other node acquires it (create-if-absent with its lease, and
// reads the manifest in the same transaction), loads the chunks with one
// range read, checks the CRC32C, and serves its first call. The interruption
// is from the stop to the first call served.

type sprNode struct {
	name  string
	lease clientv3.LeaseID
	state []byte // nil: does not own the object
}

const sprChunk = 1 << 20

type StopPersistReload struct {
	c      *clientv3.Client
	prefix string
	nodes  [2]*sprNode
	owner  int
}

func NewStopPersistReload(ctx context.Context, c *clientv3.Client, prefix string, size int) (*StopPersistReload, error) {
	s := &StopPersistReload{c: c, prefix: prefix}
	for i, name := range []string{"a", "b"} {
		l, err := c.Grant(ctx, 30)
		if err != nil {
			return nil, err
		}
		s.nodes[i] = &sprNode{name: name, lease: l.ID}
	}
	state := make([]byte, size)
	for i := range state {
		state[i] = byte(i*31 + i>>8)
	}
	tr, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(prefix+"/owner"), "=", 0)).
		Then(clientv3.OpPut(prefix+"/owner", "a", clientv3.WithLease(s.nodes[0].lease))).Commit()
	if err != nil {
		return nil, err
	}
	if !tr.Succeeded {
		return nil, errors.New("bench: stop-persist-reload: the owner key exists")
	}
	s.nodes[0].state = state
	return s, nil
}

// move moves the object to the other node and returns the interruption.
func (s *StopPersistReload) Move(ctx context.Context) (time.Duration, error) {
	from, to := s.nodes[s.owner], s.nodes[1-s.owner]
	t0 := time.Now()
	// 1. Stop and persist.
	state := from.state
	from.state = nil
	chunks := (len(state) + sprChunk - 1) / sprChunk
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var perr atomic.Pointer[error]
	for i := range chunks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			part := state[i*sprChunk : min(len(state), (i+1)*sprChunk)]
			if _, err := s.c.Put(ctx, fmt.Sprintf("%s/state/%06d", s.prefix, i), string(part)); err != nil {
				perr.Store(&err)
			}
		})
	}
	wg.Wait()
	if p := perr.Load(); p != nil {
		return 0, *p
	}
	manifest := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, uint64(len(state))), crc32.Checksum(state, crc32.MakeTable(crc32.Castagnoli)))
	owner := s.prefix + "/owner"
	tr, err := s.c.Txn(ctx).If(clientv3.Compare(clientv3.Value(owner), "=", from.name), clientv3.Compare(clientv3.LeaseValue(owner), "=", from.lease)).
		Then(clientv3.OpPut(s.prefix+"/manifest", string(manifest)), clientv3.OpDelete(owner)).Commit()
	if err != nil {
		return 0, err
	}
	if !tr.Succeeded {
		return 0, errors.New("bench: stop-persist-reload: lost ownership")
	}
	// 2. Acquire elsewhere, and load.
	tr, err = s.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(owner), "=", 0)).
		Then(clientv3.OpPut(owner, to.name, clientv3.WithLease(to.lease)), clientv3.OpGet(s.prefix+"/manifest")).Commit()
	if err != nil {
		return 0, err
	}
	if !tr.Succeeded || len(tr.Responses) != 2 || len(tr.Responses[1].GetResponseRange().Kvs) != 1 {
		return 0, errors.New("bench: stop-persist-reload: acquire failed")
	}
	m := tr.Responses[1].GetResponseRange().Kvs[0].Value
	size, sum := int(binary.BigEndian.Uint64(m)), binary.BigEndian.Uint32(m[8:])
	resp, err := s.c.Get(ctx, s.prefix+"/state/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(int64(chunks)))
	if err != nil {
		return 0, err
	}
	loaded := make([]byte, 0, size)
	for _, kv := range resp.Kvs {
		loaded = append(loaded, kv.Value...)
	}
	if len(loaded) != size || crc32.Checksum(loaded, crc32.MakeTable(crc32.Castagnoli)) != sum {
		return 0, errors.New("bench: stop-persist-reload: loaded state does not match")
	}
	to.state = loaded
	// 3. The first call served: read the state.
	if !bytes.Equal(to.state[:min(8, size)], state[:min(8, size)]) {
		return 0, errors.New("bench: stop-persist-reload: wrong state")
	}
	d := time.Since(t0)
	s.owner = 1 - s.owner
	return d, nil
}

func (s *StopPersistReload) Close(ctx context.Context) {
	for _, n := range s.nodes {
		s.c.Revoke(ctx, n.lease)
	}
	s.c.Delete(ctx, s.prefix+"/", clientv3.WithPrefix())
}
