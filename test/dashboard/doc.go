// Package dashboard tests locationd's dashboard in a real browser: a
// headless Chromium (Debian's chromium package), driven by chromedp,
// against a running `locationd demo` on free ports. Its test is all it
// has (dashboard_test.go). Without Chromium the test is skipped, unless
// CI=true: then it fails.
package dashboard
