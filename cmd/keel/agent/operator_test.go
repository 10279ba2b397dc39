package agent

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

func call(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

func TestOperatorMembersTransferRemove(t *testing.T) {
	c := newTestCluster(t, 3)
	base := "http://" + c.agents[0].HTTPAddr()

	if code := call(t, "GET", base+"/livez", "", nil); code != 200 {
		t.Fatalf("livez: %d", code)
	}
	// The member list is refreshed in the background: give it a moment to show n3.
	var members struct{ Members []MemberInfo }
	deadline := time.Now().Add(5 * time.Second)
	for {
		members.Members = nil
		code := call(t, "GET", base+"/v1/agent/members", "", &members)
		if code == 200 && len(members.Members) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members: %d %+v", code, members)
		}
		time.Sleep(50 * time.Millisecond)
	}
	lead := ""
	for _, m := range members.Members {
		if m.Leader {
			lead = m.ID
		}
		if m.Suffrage != "Voter" {
			t.Fatalf("member %+v is not a voter", m)
		}
	}
	if lead == "" {
		t.Fatal("no leader in members")
	}

	// Transfer leadership to a named follower.
	target := "n1"
	if lead == target {
		target = "n2"
	}
	if code := call(t, "POST", base+"/v1/agent/transfer-leader", `{"id":"`+target+`"}`, nil); code != 200 {
		t.Fatalf("transfer-leader: %d", code)
	}
	deadline = time.Now().Add(5 * time.Second)
	for c.agents[0].Node().Status().LeaderID != target {
		if time.Now().After(deadline) {
			t.Fatalf("leader is %q, want %q", c.agents[0].Node().Status().LeaderID, target)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Remove a follower; unknown IDs are 404, bad bodies 400.
	victim := "n3"
	if target == "n3" {
		victim = "n2"
	}
	if code := call(t, "DELETE", base+"/v1/agent/peers/nobody", "", nil); code != 404 {
		t.Fatalf("remove unknown peer: %d", code)
	}
	if code := call(t, "POST", base+"/v1/agent/transfer-leader", `{`, nil); code != 400 {
		t.Fatalf("bad body: %d", code)
	}
	if code := call(t, "DELETE", base+"/v1/agent/peers/"+victim, "", nil); code != 200 {
		t.Fatalf("remove-peer: %d", code)
	}
	deadline = time.Now().Add(5 * time.Second)
	for len(c.agents[0].Node().Status().Members) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("members after remove: %+v", c.agents[0].Node().Status().Members)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
