// Package baseline is the least a dispatcher must do, shared by test/bench/dispatcher and the
// dispatcher package's benchmarks so both measure against the same loop: fill a queue, then
// consume it with a prefetch, POST each body to the function with net/http and ack after
// the 2xx.
package baseline

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Fill publishes n persistent ~40-byte JSON messages to queue and waits for their confirms.
func Fill(ch *amqp.Channel, queue string, n int) error {
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("enable confirms: %w", err)
	}
	dcs := make([]*amqp.DeferredConfirmation, 0, n)
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: strconv.Itoa(i),
			Body: fmt.Appendf(nil, `{"order":%d,"item":"bench","qty":1}`, i),
		})
		if err != nil {
			return fmt.Errorf("publish message %d: %w", i, err)
		}
		dcs = append(dcs, dc)
	}
	for i, dc := range dcs {
		if !dc.Wait() {
			return fmt.Errorf("publish of message %d nacked", i)
		}
	}
	return nil
}

// SentHeader is the AMQP header in which latency runs stamp the publish time; BarePost hands it
// on to the function as the dispatcher does (X-Amqp-Header-Sent-Ns).
const SentHeader = "sent-ns"

// BarePost consumes n messages of queue with prefetch workers on ch, workers each POSTing a
// delivery's body to target with one net/http client (keep-alive, a connection per worker)
// and acking it after the 2xx. After a failure the workers stop taking deliveries, and it
// returns that failure.
func BarePost(ch *amqp.Channel, queue, target string, n, workers int) error {
	if err := ch.Qos(workers, 0, false); err != nil {
		return fmt.Errorf("set prefetch: %w", err)
	}
	const tag = "bare-post"
	ds, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", queue, err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers, DisableCompression: true}}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		left  = n
		first error
	)
	post := func(d amqp.Delivery) error {
		req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(string(d.Body)))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", d.ContentType)
		if s, ok := d.Headers[SentHeader].(string); ok {
			req.Header.Set("X-Amqp-Header-Sent-Ns", s)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("function answered %d", resp.StatusCode)
		}
		return d.Ack(false)
	}
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				if left == 0 || first != nil {
					mu.Unlock()
					return
				}
				left--
				mu.Unlock()
				if err := post(<-ds); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if err := ch.Cancel(tag, false); err != nil && first == nil {
		first = fmt.Errorf("cancel consumer: %w", err)
	}
	return first
}
