package jsonutf8

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for i, tc := range []struct {
		doc  string
		want string // "" = valid; otherwise a substring of the error
	}{
		{`{"success":[{"type":"put","key":"a","value":"aGk="}]}`, ""},
		{`{"k":"caf\u00e9 \ud83d\ude00 é"}`, ""},
		{`{"k":"\\ud800"}`, ""}, // an escaped backslash, not an escape
		{`null`, ""},
		{"{\"success\":[{\"type\":\"put\",\"key\":\"a\xff\"}]}", "success[0].key is not valid UTF-8"},
		{`{"success":[{"type":"put","key":"ok"},{"type":"put","key":"\ud800"}]}`, "success[1].key is"},
		{`{"compare":[{"key":"\udc00x"}]}`, "compare[0].key is"},
		{`{"spec":{"a":[1,"x",{"b":"\ud83dz"}]}}`, "spec.a[2].b is"},
		{"{\"spec\":{\"n\xc3\":1}}", "a member name in spec is"},
		{"\"\xff\"", "the body is"},
	} {
		err := Check([]byte(tc.doc))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("#%d: Check(%q) = %v, want nil", i, tc.doc, err)
		case tc.want != "" && (err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("#%d: Check(%q) = %v, want an error containing %q", i, tc.doc, err, tc.want)
		}
	}
}
