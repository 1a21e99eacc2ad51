package chaos

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// rollingExitWait bounds the wait for a node's exit after SIGTERM: its drain
// (meshnode --drain-timeout, 60 s by default), the relocations in flight at
// its deadline, and the stop.
const rollingExitWait = 90 * time.Second

// rollingRestart is the fault RollingRestart: every node in turn gets
// SIGTERM — it drains (design.md §7: its objects are relocated to the other
// nodes, then its lease is revoked) and exits — and is restarted with the
// same name and addresses; the next one goes once it serves again. A node
// that does not exit in rollingExitWait is killed (the fault then fails), and
// so is a node that exits with a non-zero status: a drain must lose nothing
// and end cleanly.
func (f *Faults) rollingRestart(ctx context.Context) error {
	var errs []error
	for _, n := range f.c.nodes {
		if ctx.Err() != nil {
			break
		}
		if !n.proc.Alive() {
			f.c.cfg.logf("chaos: rolling restart: %s is not running: restarting it", n.Name)
			if err := f.c.restartNode(ctx, n, nil); err != nil {
				return err
			}
			continue
		}
		f.c.cfg.logf("chaos: rolling restart: SIGTERM %s@%d (drain, exit, restart)", n.Name, n.Gen)
		start := time.Now()
		if err := n.proc.Signal(syscall.SIGTERM); err != nil {
			return err
		}
		f.c.event(n, "sigterm")
		if !n.proc.Wait(rollingExitWait) {
			n.proc.Kill()
			f.c.event(n, "sigkill")
			errs = append(errs, fmt.Errorf("chaos: rolling restart: %s still running %v after SIGTERM: killed", n.Name, rollingExitWait))
		} else if err := n.proc.Err(); err != nil {
			errs = append(errs, fmt.Errorf("chaos: rolling restart: %s exited with %v after SIGTERM", n.Name, err))
		}
		exited := time.Since(start)
		if err := f.c.restartNode(ctx, n, nil); err != nil {
			return err
		}
		f.c.cfg.logf("chaos: rolling restart: %s exited %v after SIGTERM; serving again as generation %d after %v",
			n.Name, exited.Round(time.Millisecond), n.Gen, time.Since(start).Round(time.Millisecond))
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}
