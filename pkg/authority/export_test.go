package authority

import (
	"context"
	"time"
)

// SetListScanMax lowers the records one ListPage reads, for a test; the
// returned function restores it.
func SetListScanMax(n int) (restore func()) {
	old := listScanMax
	listScanMax = n
	return func() { listScanMax = old }
}

// SetCacheClock gives c a clock of the test's, before it runs.
func SetCacheClock(c *Cache, now func() time.Time) { c.now = now }

// LoadCache lists every record into c once, as its Run does after a
// watch error, and returns the listing's revision.
func LoadCache(ctx context.Context, c *Cache) (int64, error) { return c.load(ctx) }
