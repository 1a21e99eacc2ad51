// Package examples checks the examples/ modules as their users run them:
// each builds and vets alone, on the public packages only, and the cart
// example's nodes join a cluster beside a stock meshnode, are called through
// every gateway, relocated while called and drained, losing nothing.
package examples
