// Package codecheck is the gateway's optional review of uploaded code by a language model
// (an OpenAI-compatible chat completions endpoint), before the upload is stored and built.
//
// It is advisory, not a sandbox: the sandbox and the tenancy rules are what contain a
// function. Its limits: it sees only UTF-8 text files of at most MaxFileBytes each and
// MaxBytes in all (binaries, archives and whatever lies past the cap go unreviewed); it flags
// clearly malicious intent only, and a model can be wrong or talked round by the code it
// reads; it fails open — when the endpoint cannot answer (down, slow, a reply that is not a
// verdict) the gateway logs a warning and the upload proceeds. Only a parsed {"safe": false}
// rejects an upload (400, with the model's reason).
package codecheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"sless.dev/sless/buildkit"
)

// Checker reviews uploaded code before it is built. An error means the reviewer could not
// answer (the upload then proceeds); a Verdict with Safe false rejects the upload.
type Checker interface {
	Check(ctx context.Context, files []File) (Verdict, error)
}

// File is one text file shown to the reviewer.
type File struct {
	Name    string
	Content string
}

// Verdict is the reviewer's answer.
type Verdict struct {
	Safe   bool   `json:"safe"`
	Reason string `json:"reason"`
}

// MaxBytes bounds the code sent for review (prompt size, reviewer cost); MaxFileBytes one
// file of it.
const (
	MaxBytes     = 200 << 10
	MaxFileBytes = 256 << 10
)

// Files collects the upload's UTF-8 text files, in the upload's order, up to MaxBytes.
func Files(src *buildkit.Source) ([]File, error) {
	var (
		out   []File
		total int
	)
	for _, f := range src.Files {
		if f.Size > MaxFileBytes || total+int(f.Size) > MaxBytes {
			continue
		}
		data, err := f.ReadAll(MaxFileBytes)
		if err != nil {
			return nil, fmt.Errorf("reading %s for the code check: %w", f.Name, err)
		}
		if utf8.Valid(data) {
			out = append(out, File{Name: f.Name, Content: string(data)})
			total += len(data)
		}
	}
	return out, nil
}

// LLM asks an OpenAI-compatible chat completions endpoint to review code.
type LLM struct {
	// URL is the API base, e.g. http://llm.internal/v1; /chat/completions is appended.
	URL    string
	Model  string
	APIKey string
	// Client defaults to one with a 30s timeout.
	Client *http.Client
}

var _ Checker = (*LLM)(nil)

const reviewPrompt = `You review source code uploaded to a serverless platform before it is built and run.
Answer with one JSON object and nothing else: {"safe": true|false, "reason": "<one sentence>"}.
Unsafe means clearly malicious: crypto mining, reverse shells, credential or token theft,
scanning or attacking other hosts, escaping the container. Ordinary code, even buggy, is safe.`

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model          string            `json:"model"`
	Messages       []chatMessage     `json:"messages"`
	Temperature    float64           `json:"temperature"`
	ResponseFormat map[string]string `json:"response_format"`
}

type chatResponse struct {
	Choices []struct {
		Message chatMessage `json:"message"`
	} `json:"choices"`
}

// Check sends the files for review and parses the verdict.
func (l *LLM) Check(ctx context.Context, files []File) (Verdict, error) {
	var code strings.Builder
	for _, f := range files {
		fmt.Fprintf(&code, "=== %s ===\n%s\n", f.Name, f.Content)
	}
	body, err := json.Marshal(chatRequest{
		Model:          l.Model,
		Messages:       []chatMessage{{Role: "system", Content: reviewPrompt}, {Role: "user", Content: code.String()}},
		ResponseFormat: map[string]string{"type": "json_object"},
	})
	if err != nil {
		return Verdict{}, fmt.Errorf("encode code check request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(l.URL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return Verdict{}, fmt.Errorf("code check endpoint %q: %w", l.URL, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if l.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+l.APIKey)
	}
	hc := l.Client
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Verdict{}, fmt.Errorf("code check endpoint: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return Verdict{}, fmt.Errorf("code check endpoint answered %d: %s", resp.StatusCode, msg)
	}
	var cr chatResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&cr); err != nil {
		return Verdict{}, fmt.Errorf("decode code check answer: %w", err)
	}
	if len(cr.Choices) == 0 {
		return Verdict{}, errors.New("code check answer has no choices")
	}
	return parseVerdict(cr.Choices[0].Message.Content)
}

// parseVerdict reads the model's JSON verdict, tolerating a Markdown code fence around it.
func parseVerdict(content string) (Verdict, error) {
	content = strings.TrimSpace(content)
	content = strings.TrimPrefix(content, "```json")
	content = strings.Trim(content, "`\n ")
	var raw struct {
		Safe   *bool  `json:"safe"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(content), &raw); err != nil || raw.Safe == nil {
		return Verdict{}, fmt.Errorf("code check answer is not a {\"safe\": bool} verdict: %.200q", content)
	}
	v := Verdict{Safe: *raw.Safe, Reason: raw.Reason}
	if !v.Safe && v.Reason == "" {
		v.Reason = "no reason given"
	}
	return v, nil
}
