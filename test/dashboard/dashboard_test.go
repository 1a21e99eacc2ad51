package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/meshloc/meshloc/internal/demo"
	"github.com/meshloc/meshloc/internal/etcdtest"
	"github.com/meshloc/meshloc/internal/freeport"
	"github.com/meshloc/meshloc/pkg/client"
	"github.com/meshloc/meshloc/pkg/tracing"
)

// chromium finds the browser: $MESHLOC_CHROMIUM, else Debian's chromium
// (or another Chromium on PATH). Missing: skip, but fail under CI=true.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MESHLOC_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium on PATH (apt-get install -y chromium; .ci/run installs it): the dashboard test cannot run")
	}
	t.Skip("no Chromium on PATH (apt-get install -y chromium): skipping the browser test")
	return ""
}

func port(t *testing.T) string {
	t.Helper()
	p, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p)
}

// lines is the demo's output, and a signal when a line containing want
// was written.
type lines struct {
	mu    sync.Mutex
	b     strings.Builder
	want  string
	ready chan struct{}
	once  sync.Once
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	if strings.Contains(l.b.String(), l.want) {
		l.once.Do(func() { close(l.ready) })
	}
	return len(p), nil
}

func (l *lines) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestDashboard: the page of a running demo loads with no console error,
// shows every node, shows relocations live (one asked with its relocate
// button appears and completes, with its timeline), and its search finds
// an object. The screenshot is saved under the test's temp dir (and to
// $MESHLOC_SCREENSHOT when set: docs/dashboard.png is made so).
func TestDashboard(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo and a browser")
	}
	browser := chromium(t)
	// Every trace sampled (and dropped): the timeline names its trace.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	defer tracing.Use(tp)()

	cfg := demo.DefaultConfig()
	cfg.Locationd.DataDir = t.TempDir()
	cfg.Locationd.ListenClient = "http://" + port(t)
	cfg.Locationd.ListenPeer = "http://" + port(t)
	cfg.Locationd.HTTP = port(t)
	cfg.Nodes, cfg.NodeHTTP = nil, nil
	for range 3 {
		cfg.Nodes = append(cfg.Nodes, port(t))
		cfg.NodeHTTP = append(cfg.NodeHTTP, port(t))
	}
	cfg.Workers, cfg.Objects = 4, 8
	cfg.Every = 5 * time.Second
	out := &lines{want: "try (after make build)", ready: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	demoCtx, stopDemo := context.WithCancel(ctx)
	demoErr := make(chan error, 1)
	go func() { demoErr <- demo.Run(demoCtx, cfg, out, zerolog.Nop()) }()
	defer func() {
		stopDemo()
		if err := <-demoErr; err != nil {
			t.Errorf("demo: %v\n%s", err, out)
		}
	}()
	select {
	case <-out.ready:
	case err := <-demoErr:
		demoErr <- err
		t.Fatalf("demo ended before it served: %v\n%s", err, out)
	case <-ctx.Done():
		t.Fatalf("demo did not start:\n%s", out)
	}
	if first, _, _ := strings.Cut(out.String(), "\n"); first != "meshloc demo: dashboard http://"+cfg.Locationd.HTTP+"/" {
		t.Errorf("the demo's first line is %q, want the dashboard's URL", first)
	}

	// An object of our own, that the demo's relocator does not move.
	const obj = "actor/counter/dashboard-test"
	c, err := client.New(ctx, client.Config{Nodes: cfg.Nodes})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Call(ctx, obj, "add", "5"); err != nil {
		t.Fatal(err)
	}

	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 1080))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()

	// Every console error, uncaught exception and browser log error of the
	// page (a failed request included) is a problem.
	var mu sync.Mutex
	var problems []string
	messages := chromedp.Console(bctx)
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		t.Fatal(err)
	}
	var watchers sync.WaitGroup
	defer watchers.Wait()
	defer cancelBrowser()
	watchers.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				problems = append(problems, m.String())
				mu.Unlock()
			}
		}
	})

	url := "http://" + cfg.Locationd.HTTP + "/"
	// (MESHLOC_SCREENSHOT_WAIT, e.g. 60s, fills the charts for a picture.)
	pause := 3 * time.Second
	if d, err := time.ParseDuration(os.Getenv("MESHLOC_SCREENSHOT_WAIT")); err == nil && d > 0 && d < 4*time.Minute {
		pause = d
	}
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 90*time.Second+pause)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			dctx, cancel := context.WithTimeout(bctx, 10*time.Second)
			defer cancel()
			page, _ := chromedp.Run(dctx, chromedp.Text(chromedp.CSS(`main`)))
			bar, _ := chromedp.Run(dctx, chromedp.Text(chromedp.CSS(`header`)))
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("%s: %v\nheader: %s\nconsole: %s\npage:\n%s", what, err, bar, strings.Join(problems, "\n"), page)
		}
	}
	text := func(sel string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 90*time.Second)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }
	// At once, before any snapshot or event: no table is empty (each says
	// it is loading), so a first look never shows a page that seems broken.
	do("load the page", chromedp.Navigate(url))
	for _, tb := range []string{"#nodes", "#inflight", "#recent", "#orphans"} {
		if got := text(tb + " tbody"); strings.TrimSpace(got) == "" {
			t.Errorf("%s is empty at once; want rows, or loading…", tb)
		}
	}
	do("the stream connected", visible(`#stream.on`))
	do("every node shown", visible(`#nodes tbody tr[data-node="n1"]`), visible(`#nodes tbody tr[data-node="n2"]`), visible(`#nodes tbody tr[data-node="n3"]`))
	if row := text(`#nodes tbody tr[data-node="n1"]`); !strings.Contains(row, "counter") || !strings.Contains(row, "dbank") {
		t.Errorf("n1's row %q names no types (its types column)", row)
	}
	if got := text(`#inflight tbody`) + text(`#recent tbody`); strings.Contains(got, "loading") {
		t.Errorf("still loading once the nodes are shown: %q", got)
	}
	do("the demo's relocations shown live", visible(`#recent tbody tr[data-outcome="completed"]`))
	do("etcd's fill shown, without an alarm", visible(`#etcd.on`))
	if got := text(`#etcd`); !strings.HasPrefix(got, "etcd ") || !strings.HasSuffix(got, " of 2048 MiB") {
		t.Errorf("the etcd pill says %q, want its data in use of its 2048 MiB quota", got)
	}

	// The search finds our object by part of its name and shows its record.
	do("search", chromedp.SendKeys(chromedp.CSS(`#search-input`), "dashboard-te"), chromedp.Click(chromedp.CSS(`#search button`)), visible(`#object`))
	if got := text(`#object-name`); got != obj {
		t.Fatalf("the search shows %q, want %s", got, obj)
	}
	record := text(`#object-record`)
	if !strings.Contains(record, "owner") || !strings.Contains(record, "authority generation") {
		t.Errorf("record shown: %q", record)
	}
	// "relocate to" offers the nodes that may take it: every node of the
	// demo hosts counters, so the two that are not its owner.
	owner, err := c.Call(ctx, obj, "get")
	if err != nil {
		t.Fatal(err)
	}
	do("the eligible targets offered", chromedp.WaitNotPresent(chromedp.CSS(`#relocate-target option[value="`+owner.Node+`"]`)))
	opts := text(`#relocate-target`)
	for _, id := range []string{"n1", "n2", "n3"} {
		if strings.Contains(opts, id) != (id != owner.Node) {
			t.Errorf("relocate to offers %q; want the two nodes other than its owner %s", opts, owner.Node)
		}
	}

	// Its relocate button: the relocation appears and completes in the
	// live view (the stream's, kept to this object: the demo moves
	// hundreds a second), and its timeline has both sides' phases.
	do("relocate", chromedp.Click(chromedp.CSS(`#only-selected`)), chromedp.Click(chromedp.CSS(`#relocate button`)),
		visible(`#relocate-result[data-outcome="completed"]`))
	result := text(`#relocate-result`)
	fields := strings.Fields(result) // relocation <short id> completed ...
	if len(fields) < 3 || fields[0] != "relocation" {
		t.Fatalf("relocate result %q", result)
	}
	row := fmt.Sprintf(`#recent tbody tr[data-id$="%s"][data-outcome="completed"]`, fields[1])
	do("the relocation in the live list, then its timeline", visible(row), chromedp.Click(chromedp.CSS(row)),
		visible(`#timeline-table tbody tr[data-phase="commit"]`))
	timeline := text(`#timeline-table`)
	for _, p := range []string{"intent", "seal", "state", "ready", "cutover", "commit", "admission", "settle"} {
		if !strings.Contains(timeline, p) {
			t.Errorf("timeline lacks %s:\n%s", p, timeline)
		}
	}
	if tr := text(`#timeline-trace`); !regexp.MustCompile(`^trace [0-9a-f]{32}$`).MatchString(tr) {
		t.Errorf("the timeline names trace %q, want its trace id", tr)
	}

	// Let the charts gather a few seconds, then the picture.
	do("every object's relocations again, wait, then the top of the page", chromedp.Click(chromedp.CSS(`#only-selected`)),
		chromedp.Sleep(pause), chromedp.ScrollIntoView(chromedp.CSS(`header`)))
	sctx, cancelShot := context.WithTimeout(bctx, time.Minute)
	png, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
	cancelShot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
	if dst := os.Getenv("MESHLOC_SCREENSHOT"); dst != "" {
		if err := os.WriteFile(dst, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// etcd's NOSPACE alarm: a banner says so and what to do, and goes when
	// the alarm is disarmed.
	ec := etcdtest.Client(t, cfg.Locationd.ListenClient)
	etcdtest.RaiseNoSpace(t, ec)
	do("the NOSPACE alarm shown", visible(`#etcd-alarm`), visible(`#etcd.bad`))
	if got := text(`#etcd-alarm`); !strings.Contains(got, "NOSPACE") || !strings.Contains(got, "alarm disarm") {
		t.Errorf("the alarm banner says %q, want NOSPACE and what to do", got)
	}
	etcdtest.DisarmNoSpace(t, ec)
	do("the alarm gone", chromedp.WaitNotVisible(chromedp.CSS(`#etcd-alarm`)), visible(`#etcd.on`))

	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the page logged errors:\n%s", strings.Join(problems, "\n"))
	}
}
