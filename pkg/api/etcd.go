package api

// EtcdStatus answers GET /v1/etcd: the etcd locationd uses, how full it is,
// its alarms, and what keeps its history short (docs/operating/etcd.md).
type EtcdStatus struct {
	// Embedded: locationd runs this etcd (its member; the others of a
	// multi-member cluster are other locationd processes).
	Embedded bool `json:"embedded"`
	// Members are etcd's answers to a status request, one per endpoint
	// locationd uses.
	Members []EtcdMember `json:"members"`
	// Alarms are etcd's alarms (NOSPACE: out of space, every write
	// refused; CORRUPT), empty when there is none.
	Alarms []EtcdAlarm `json:"alarms"`
	// Hint says what to do about the alarms ("" without any).
	Hint       string         `json:"hint,omitempty"`
	Compaction EtcdCompaction `json:"compaction"`
}

// EtcdMember is one endpoint's status.
type EtcdMember struct {
	Endpoint string `json:"endpoint"`
	// Error is why the status could not be read (the other fields are
	// then zero).
	Error string `json:"error,omitempty"`
	// ID is the member's id in hex, as etcdctl prints it.
	ID       string `json:"id,omitempty"`
	Leader   bool   `json:"leader"`
	Revision int64  `json:"revision"`
	// DBSize is the member's file, DBSizeInUse its part in use; QuotaBytes
	// the size at which etcd raises NOSPACE (it compares DBSize).
	DBSize      int64 `json:"dbSize"`
	DBSizeInUse int64 `json:"dbSizeInUse"`
	QuotaBytes  int64 `json:"quotaBytes"`
	// Errors are the member's own ("etcdserver: no leader", alarms).
	Errors []string `json:"errors,omitempty"`
}

// EtcdAlarm is one alarm raised on one member.
type EtcdAlarm struct {
	Member string `json:"member"`
	Type   string `json:"type"`
}

// EtcdCompaction is what keeps etcd's history short.
type EtcdCompaction struct {
	// CompactedRevision is the revision etcd compacted at last (0: never),
	// as locationd last read it; History the revisions kept since.
	CompactedRevision int64 `json:"compactedRevision"`
	History           int64 `json:"history"`
	// Auto: "on" (the embedded etcd's own loop; or an external etcd whose
	// compacted revision moved in the last 75 minutes), "off" (the
	// embedded etcd's retention is 0; or an external etcd whose compacted
	// revision stayed 75 minutes while it was written: run it with
	// --auto-compaction-retention), "unknown" (an external etcd not
	// watched that long yet).
	Auto string `json:"auto"`
	// The embedded etcd's maintenance: its retention, whether it
	// defragments, and what it did since locationd started.
	Retention           string `json:"retention,omitempty"`
	Defrag              bool   `json:"defrag,omitempty"`
	Compactions         int64  `json:"compactions,omitempty"`
	PressureCompactions int64  `json:"pressureCompactions,omitempty"`
	Defrags             int64  `json:"defrags,omitempty"`
}
