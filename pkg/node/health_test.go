package node_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// goTool runs a tool of the tools/ module (go tool -modfile=tools/go.mod)
// from the repository's root, and returns its exit status and output.
func goTool(t *testing.T, args ...string) (int, string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // the first run builds the tool
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "-modfile=tools/go.mod"}, args...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("go tool %v: %v: %s", args, err, out)
	}
	return 0, string(out)
}

func healthOf(t *testing.T, addr string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetStatus()
}

// TestHealthAndReflection: the node's gRPC port answers grpc.health.v1
// (SERVING while it serves, NOT_SERVING once it drains) and server
// reflection, to the stock tools: grpcurl and grpc_health_probe.
func TestHealthAndReflection(t *testing.T) {
	if testing.Short() {
		t.Skip("builds grpcurl and grpc-health-probe, starts etcd and a node")
	}
	m := startMesh(t, 1)
	n := m.nodes[0]
	addr := n.Address()
	if st := healthOf(t, addr); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of a serving node: %v", st)
	}
	code, out := goTool(t, "grpcurl", "-plaintext", addr, "list")
	for _, svc := range []string{"grpc.health.v1.Health", "meshloc.rpc.v1.CallService", "meshloc.rpc.v1.AdminService", "meshloc.rpc.v1.PeerService"} {
		if code != 0 || !strings.Contains(out, svc+"\n") {
			t.Errorf("grpcurl -plaintext %s list: exit %d, does not list %s:\n%s", addr, code, svc, out)
		}
	}
	code, out = goTool(t, "grpcurl", "-plaintext", addr, "describe", "meshloc.rpc.v1.AdminService")
	if code != 0 || !strings.Contains(out, "rpc Relocate") || !strings.Contains(out, "rpc WatchEvents") {
		t.Errorf("grpcurl describe AdminService: exit %d:\n%s", code, out)
	}
	if code, out = goTool(t, "grpc-health-probe", "-addr", addr); code != 0 || !strings.Contains(out, "SERVING") {
		t.Errorf("grpc_health_probe of a serving node: exit %d: %s", code, out)
	}
	if code, out = goTool(t, "grpc-health-probe", "-addr", addr, "-service", "meshloc.rpc.v1.CallService"); code != 0 {
		t.Errorf("grpc_health_probe -service CallService: exit %d: %s", code, out)
	}

	n.SetDraining(true)
	if st := healthOf(t, addr); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health of a draining node: %v", st)
	}
	// grpc_health_probe exits 4 for NOT_SERVING.
	if code, out = goTool(t, "grpc-health-probe", "-addr", addr); code != 4 || !strings.Contains(out, "NOT_SERVING") {
		t.Errorf("grpc_health_probe of a draining node: exit %d (want 4): %s", code, out)
	}
}
