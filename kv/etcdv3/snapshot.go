package etcdv3

import (
	"errors"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// snapshotChunk is the size of a Snapshot message's blob, as etcd's
// snapshotSendBufferSize.
const snapshotChunk = 32 << 10

// Snapshot streams keel's saved snapshot (GET /v1/agent/snapshot's file) in an etcd
// envelope (kv.Operator.SaveEtcdSnapshot: padded to 512-byte pages, followed by its
// sha256), for a caller with the snapshot right. `etcdctl snapshot save` keeps it and
// `keel snapshot restore FILE` restores it; etcdutl's snapshot restore and status
// cannot read it (it is not a bbolt database). The size is not known ahead, so
// remaining_bytes is 0; etcd's client reads to the end of the stream.
func (m etcdMaintenance) Snapshot(_ *pb.SnapshotRequest, ss grpc.ServerStreamingServer[pb.SnapshotResponse]) error {
	ctx := ss.Context()
	src := peerAddr(ctx)
	if err := m.e.core.AdmitRequest(src); err != nil {
		return err
	}
	defer m.e.core.ReleaseRequest(src)
	pr, pw := io.Pipe()
	defer pr.Close() // a failed Send ends the writer
	go func() { pw.CloseWithError(m.e.core.SaveEtcdSnapshot(ctx, callerOf(ctx), pw)) }()
	for {
		buf := make([]byte, snapshotChunk) // Send may keep it until the message is written
		n, err := io.ReadFull(pr, buf)
		if n > 0 {
			if serr := ss.Send(&pb.SnapshotResponse{Blob: buf[:n], Version: Version}); serr != nil {
				return serr
			}
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil
		case err != nil:
			return err
		}
	}
}
