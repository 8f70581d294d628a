// Command grpchealth is the prebuilt image of the e2e gRPC journey (test/e2e/grpc_test.go):
// a gRPC server speaking HTTP/2 without TLS on $PORT, as a function with protocol h2c does.
// It serves the standard health service (grpc.health.v1), which has both call shapes the
// journey needs: Check (unary) and Watch (server streaming). The "ticks" service flips
// between SERVING and NOT_SERVING every 300 ms, so a watch of it gets a message each time.
package main

import (
	"cmp"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	ln, err := net.Listen("tcp", ":"+cmp.Or(os.Getenv("PORT"), "8080"))
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	hs.SetServingStatus("ticks", healthpb.HealthCheckResponse_SERVING)
	go func() {
		serving := true
		for range time.Tick(300 * time.Millisecond) {
			st := healthpb.HealthCheckResponse_SERVING
			if serving = !serving; !serving {
				st = healthpb.HealthCheckResponse_NOT_SERVING
			}
			hs.SetServingStatus("ticks", st)
		}
	}()
	// SIGTERM (a pod scaled away) lets the calls in flight finish for a while; a watch never
	// finishes by itself, so the server stops after that.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-stop
		time.AfterFunc(10*time.Second, srv.Stop)
		srv.GracefulStop()
	}()
	if err := srv.Serve(ln); err != nil {
		log.Fatal(err)
	}
}
