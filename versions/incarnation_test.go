package versions

import (
	"encoding/json"
	"testing"
)

// An incarnation reads as a JSON number (what every release writes) and as a string
// (what a later release may write, for JavaScript clients), exactly above 2^53.
func TestIncarnationNumberOrString(t *testing.T) {
	const big = uint64(1)<<63 + 12345 // not representable in a float64
	for _, in := range []string{
		`{"nodeID":"n1","incarnation":9223372036854788153,"encodingVersion":"v2"}`,
		`{"nodeID":"n1","incarnation":"9223372036854788153","encodingVersion":"v2"}`,
	} {
		var e ServerStorageVersion
		if err := json.Unmarshal([]byte(in), &e); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if e.Incarnation != big || e.NodeID != "n1" || e.EncodingVersion != "v2" {
			t.Errorf("%s: decoded %+v", in, e)
		}
	}
	var e ServerStorageVersion
	if err := json.Unmarshal([]byte(`{"incarnation":"x"}`), &e); err == nil {
		t.Error("a non-number incarnation was accepted")
	}
	out, _ := json.Marshal(ServerStorageVersion{NodeID: "n1", Incarnation: big})
	var back ServerStorageVersion
	if err := json.Unmarshal(out, &back); err != nil || back.Incarnation != big {
		t.Errorf("round trip %s: %v %d", out, err, back.Incarnation)
	}
}
