package authority

// SetListScanMax lowers the records one ListPage reads, for a test; the
// returned function restores it.
func SetListScanMax(n int) (restore func()) {
	old := listScanMax
	listScanMax = n
	return func() { listScanMax = old }
}
