package agent

import (
	"bytes"
	"crypto/sha256"
	"io"
	"strings"
	"testing"
)

// The etcd envelope: its size is what etcd's client checks (a multiple of 512 plus a
// sha256), and unwrapping gives back exactly the content; a changed byte, a missing
// trailer or a plain saved file are not envelopes (the MAC then decides).
func TestEtcdEnvelope(t *testing.T) {
	for _, n := range []int{0, 1, 464, 495, 496, 497, 511, 512, 10_000} {
		content := []byte(strings.Repeat("k", n))
		var buf bytes.Buffer
		if err := writeEtcdEnvelope(&buf, func(w io.Writer) error { _, err := w.Write(content); return err }); err != nil {
			t.Fatal(err)
		}
		env := buf.Bytes()
		if len(env)%512 != sha256.Size {
			t.Fatalf("#%d: envelope of %d bytes; etcd wants a multiple of 512 plus %d", n, len(env), sha256.Size)
		}
		inner, ok, err := unwrapEtcdEnvelope(bytes.NewReader(env), int64(len(env)))
		if err != nil || !ok {
			t.Fatalf("#%d: unwrap = %v, %v", n, ok, err)
		}
		got, _ := io.ReadAll(inner)
		if !bytes.Equal(got, content) {
			t.Fatalf("#%d: unwrapped %d bytes, want the %d written", n, len(got), n)
		}
		for _, bad := range [][]byte{flip(env, len(env)/2), flip(env, len(env)-1), flip(env, len(env)-40), content} {
			if _, ok, err := unwrapEtcdEnvelope(bytes.NewReader(bad), int64(len(bad))); ok || err != nil {
				t.Fatalf("#%d: a changed or plain file unwrapped (%v, %v)", n, ok, err)
			}
		}
	}
}
