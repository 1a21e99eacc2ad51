package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshloc/meshloc/pkg/api"
)

// etcdFake answers GET /v1/etcd with a NOSPACE alarm, and every relocation
// as aborted by it.
func etcdFake(t *testing.T) string {
	write := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/etcd", func(w http.ResponseWriter, _ *http.Request) {
		write(w, api.EtcdStatus{Embedded: true,
			Members: []api.EtcdMember{{Endpoint: "http://127.0.0.1:2379", ID: "8e9e05c52164694d", Leader: true, Revision: 1200,
				DBSize: 24 << 20, DBSizeInUse: 23 << 20, QuotaBytes: 24 << 20, Errors: []string{"memberID:8e9e05c52164694d alarm:NOSPACE"}}},
			Alarms:     []api.EtcdAlarm{{Member: "8e9e05c52164694d", Type: "NOSPACE"}},
			Hint:       "etcd is out of space and refuses every write",
			Compaction: api.EtcdCompaction{Auto: "on", CompactedRevision: 1100, History: 100, Retention: "1m0s", Defrag: true, Compactions: 3}})
	})
	mux.HandleFunc("POST /v1/relocations", func(w http.ResponseWriter, _ *http.Request) {
		write(w, api.Relocation{RelocationID: "r1", Object: "actor/counter/c1", Source: "n1", Outcome: "aborted", Code: "resource_exhausted",
			Message: "intent not written: authority: etcd is out of space (NOSPACE alarm): the intent on actor/counter/c1 was not written"})
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s.URL
}

// meshctl etcd shows the sizes, the alarm and what to do; an error that
// names NOSPACE says what to do.
func TestEtcdNoSpace(t *testing.T) {
	url := etcdFake(t)
	r := meshctl(nil, "--locationd", url, "etcd")
	for _, want := range []string{"24.0 MiB", "23.0 MiB", "compaction: auto on, compacted at 1100, 100 revisions kept (embedded: retention 1m0s",
		"ALARM NOSPACE on member 8e9e05c52164694d", "refuses every write"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("meshctl etcd: exit %d, stdout:\n%s\nwant %q", r.code, r.stdout, want)
		}
	}
	r = meshctl(nil, "--locationd", url, "relocate", "actor/counter/c1")
	if r.code != 1 || !strings.Contains(r.stderr, "meshctl: aborted: ") || !strings.Contains(r.stderr, "etcdctl alarm disarm") || !strings.Contains(r.stderr, "meshctl etcd") {
		t.Errorf("meshctl relocate under NOSPACE: exit %d, stderr %q: want the abort and what to do", r.code, r.stderr)
	}
}
