package kv

import (
	"fmt"
	"testing"
)

// carveRange leaves out every reserved range, whether the range starts before,
// inside or after one, ends inside one or runs to the keyspace's end, and whether a
// reserved range runs to the end itself.
func TestCarveRange(t *testing.T) {
	r := func(a, b string) [2][]byte { return [2][]byte{[]byte(a), []byte(b)} }
	reserved := [][2][]byte{r("\x00keel/", "\x00keel0"), r("/registry/a/", "/registry/a0"), r("~", "")}
	for _, c := range []struct {
		key, end string
		want     string
	}{
		{"\x00", "", `[["\x00" "\x00keel/"] ["\x00keel0" "/registry/a/"] ["/registry/a0" "~"]]`},
		{"/", "/s", `[["/" "/registry/a/"] ["/registry/a0" "/s"]]`},
		{"/registry/a/x", "/t", `[["/registry/a0" "/t"]]`},
		{"/registry/a/x", "/registry/a/y", `[]`},
		{"a", "b", `[["a" "b"]]`},
		{"a", "~x", `[["a" "~"]]`},
		{"~a", "", `[]`},
		{"/registry/", "/registry/a/", `[["/registry/" "/registry/a/"]]`},
	} {
		var got []string
		for _, p := range carveRange([]byte(c.key), []byte(c.end), reserved) {
			got = append(got, fmt.Sprintf("[%q %q]", p[0], p[1]))
		}
		s := fmt.Sprint(got)
		if got == nil {
			s = "[]"
		}
		if s != c.want {
			t.Errorf("carve [%q, %q) = %s, want %s", c.key, c.end, s, c.want)
		}
	}
}
