// Package integration runs meshloc as its users do: real meshnode and
// locationd processes against real etcd (embedded, or a 3-member cluster),
// through their flags, ports and signals: relocations under faults, groups,
// durable objects, the recovery controller, rolling restarts. Its tests are
// all it has.
package integration
