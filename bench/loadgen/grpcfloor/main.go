// Command grpcfloor is the floor of bench/compare.sh's etcd-door rows (issue #39 item
// 3): a bare grpc-go server of etcd's KV API that answers every Range with the key it
// was asked for and a 256-byte value, and every Put and Txn with a header, at once — no
// store, no Raft, no disk. It takes etcd's command line (only --listen-client-urls and
// --version matter), so compare.sh runs it in etcd's place:
//
//	(cd bench/loadgen && go build -o /tmp/grpcfloor ./grpcfloor)
//	ETCD_BIN=/tmp/grpcfloor bash bench/compare.sh -keel-protocol etcd -only writes,reads
//
// What it reaches through clientv3 is what any server built on grpc-go can reach on
// that machine; its throughput over etcd's is the best ratio such a server can show.
package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println("grpcfloor (a bare grpc-go etcd KV server, no store)")
		return
	}
	// etcd's other flags are taken and ignored.
	listen := ""
	for i, a := range os.Args[1:] {
		if a == "--listen-client-urls" && i+2 < len(os.Args) {
			listen = os.Args[i+2]
		}
	}
	if listen == "" {
		fmt.Fprintln(os.Stderr, "grpcfloor: want --listen-client-urls http://HOST:PORT")
		os.Exit(2)
	}
	u, err := url.Parse(listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpcfloor:", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", u.Host)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpcfloor:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "grpcfloor: serving on", u.Host)
	if err := newServer().Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "grpcfloor:", err)
		os.Exit(1)
	}
}

// newServer is the floor's gRPC server: keel's door's stream window
// (kv/etcdv3/server.go), the rest grpc-go's defaults.
func newServer() *grpc.Server {
	s := grpc.NewServer(grpc.InitialWindowSize(64 << 10))
	pb.RegisterKVServer(s, kvServer{})
	pb.RegisterMaintenanceServer(s, maintenance{})
	return s
}

var header = &pb.ResponseHeader{ClusterId: 1, MemberId: 1, Revision: 2, RaftTerm: 2}

var value = make([]byte, 256)

type kvServer struct{ pb.UnimplementedKVServer }

func (kvServer) Range(_ context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	return &pb.RangeResponse{Header: header, Count: 1, Kvs: []*mvccpb.KeyValue{{
		Key: r.Key, Value: value, CreateRevision: 2, ModRevision: 2, Version: 1}}}, nil
}

func (kvServer) Put(context.Context, *pb.PutRequest) (*pb.PutResponse, error) {
	return &pb.PutResponse{Header: header}, nil
}

func (kvServer) Txn(context.Context, *pb.TxnRequest) (*pb.TxnResponse, error) {
	return &pb.TxnResponse{Header: header, Succeeded: true}, nil
}

// maintenance answers Status as a leader (every member says it leads: the load
// generator takes the first).
type maintenance struct {
	pb.UnimplementedMaintenanceServer
}

func (maintenance) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return &pb.StatusResponse{Header: header, Leader: header.MemberId, Version: "3.7.3"}, nil
}
