package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"github.com/keel-kv/keel/fsm"
)

// The single-key GET is the hottest answer of the HTTP door: it is appended by hand
// into a pooled buffer instead of going through json.NewEncoder with the answer boxed
// in an interface (TestGetJSONAsEncodingJSON holds the bytes equal to what
// encoding/json writes for api.GetResponse).

// getBufs holds writeGet's answer buffers.
var getBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// jsonContentType is the Content-Type header value shared by every writeGet answer
// (net/http only reads it; Header.Set would allocate a fresh slice per answer).
var jsonContentType = []string{"application/json"}

// writeGet answers a single-key GET with api.GetResponse{KV: kv.APIKV(kv), Revision: rev}
// as JSON, status 200.
func writeGet(w http.ResponseWriter, kv fsm.KeyValue, rev int64) {
	bp := getBufs.Get().(*[]byte)
	b := appendGetJSON((*bp)[:0], kv, rev)
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusOK)
	w.Write(b)
	if cap(b) <= 64<<10 { // a huge value's buffer is left to the collector
		*bp = b
		getBufs.Put(bp)
	}
}

// appendGetJSON appends what json.NewEncoder(w).Encode(api.GetResponse{...}) writes:
// the fields in api.KV's order, the value base64, lease omitted when 0, a newline.
func appendGetJSON(b []byte, kv fsm.KeyValue, rev int64) []byte {
	b = append(b, `{"key":`...)
	b = appendJSONString(b, kv.Key)
	b = append(b, `,"value":"`...)
	b = base64.StdEncoding.AppendEncode(b, kv.Value)
	b = append(b, `","create_revision":`...)
	b = strconv.AppendInt(b, kv.CreateRevision, 10)
	b = append(b, `,"mod_revision":`...)
	b = strconv.AppendInt(b, kv.ModRevision, 10)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, kv.Version, 10)
	if kv.Lease != 0 {
		b = append(b, `,"lease":`...)
		b = strconv.AppendInt(b, kv.Lease, 10)
	}
	b = append(b, `,"revision":`...)
	b = strconv.AppendInt(b, rev, 10)
	return append(b, "}\n"...)
}

// appendJSONString appends s as a JSON string the way encoding/json writes it: printable
// ASCII other than " \ < > & as is; anything else goes through json.Marshal (escapes,
// HTML-safe \u003c forms, U+2028/9), which keeps the rare key byte-for-byte the same.
func appendJSONString(b, s []byte) []byte {
	for _, c := range s {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			m, _ := json.Marshal(string(s)) // a string always encodes
			return append(b, m...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
