// Package chaos starts and breaks meshloc clusters for the verification
// suite (meshctl verify, test/chaos): real locationd and meshnode
// processes, optionally behind fault-injecting TCP proxies or on a 3-member
// etcd cluster; the faults of a run (kill -9, SIGSTOP, partitions, delays,
// etcd member stops and leader moves, failpoints); and the planted-bug runs
// that prove the checkers catch each known bug. It decides nothing about
// the protocol: it only does to processes what an unlucky production does.
package chaos
