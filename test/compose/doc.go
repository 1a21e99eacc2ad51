// Package compose tests the compose cluster (docker-compose.yml at the top of
// the repository) the way its users run it and break it: the real compose
// file, driven through the compose CLI and the docker CLI, with the image
// built FROM scratch from static binaries built here.
//
// The test is behind the build tag compose, so `go test ./...` does not run
// it: `make test-compose` (and so `make test`) does,
//
//	go test -count=1 -tags compose -v ./test/compose/
//
// Without docker or compose it is skipped, unless CI=true: then it fails.
// MESHLOC_COMPOSE names the compose command ("docker compose" or
// "docker-compose"; default: the plugin if it exists, else docker-compose).
//
// One run: build etcd, etcdctl, locationd, meshnode and meshctl with
// CGO_ENABLED=0 into a temporary context, build an image of its own
// (meshloc-compose-test:<project>), bring the cluster up as a project of its
// own (COMPOSE_PROJECT_NAME meshloctest<random>) on free loopback ports, and
// check, each as a subtest:
//
//   - the cluster forms: 3 etcd members healthy, both locationd ready, the 3
//     meshnodes live owners, every container healthy;
//   - calls succeed through every node (meshctl call --node, the host-built
//     binary, against each meshnode's published gRPC port: a gateway
//     forwards to the owner);
//   - a relocation commits (POST /v1/relocations; the record read back with
//     `docker-compose exec etcd1 etcdctl get --prefix /meshloc/`);
//   - docker stop of the etcd leader: calls through every node and a
//     relocation still succeed; no meshnode fences; the member rejoins;
//   - docker kill of a meshnode: its objects are orphaned, then re-created
//     elsewhere by locationd's recovery controller (memory objects answer
//     state_lost once, durable ones keep their value); it is not restarted
//     (Docker never restarts a killed container) until the test starts it;
//   - docker pause of an owner for 3 lease TTLs: its objects are served
//     elsewhere; after docker unpause nothing is accepted from it (calls sent
//     to it, some already waiting in its sockets, are answered by the new
//     owner with the current values, never by the woken one), it fences
//     itself and is restarted as a new owner generation;
//   - docker network disconnect of an owner: it fences itself (exits 1,
//     restarted by its on-failure policy), its objects move elsewhere; after
//     docker network connect (with its service alias) it serves again;
//   - last, every object is read through every node and compared with a
//     model of every acknowledged write (memory objects restart from 0 only
//     where the cluster said state_lost).
//
// At the end, also on failure (then after printing the last 200 log lines
// of every service): down -v, the image removed, and a check that no
// container, volume, network or image of the run is left. A test binary
// killed by its -timeout leaves them: remove them with
// `docker-compose -p meshloctest<…> down -v` and `docker rmi`.
package compose
