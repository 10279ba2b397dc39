package etcdv3

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// serveDoor serves e on a loopback port and returns a client connection to it, with
// opts after the insecure credentials; both end when the test does (connection first).
func serveDoor(tb testing.TB, e *Server, opts ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go e.Serve(ln)
	conn, err := grpc.NewClient(ln.Addr().String(),
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		e.Stop(context.Background())
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close(); e.Stop(context.Background()) })
	return conn
}
