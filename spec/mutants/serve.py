"""`torchlet serve` (torchlet/serve/): what a client gets, how a request ends early, and what
is refused. Harness mutants: their edits go to a copy of torchlet/, whose serve package the
mutant worker imports anew for the run (spec/mutants/worker.py); the specs serve the app
in-process (spec/support/serve/serve_app.py), so what they serve is the edited copy."""
from spec.mutants import Edit, Mutant

MODULE = "spec/test_serve.py"
PARITY = f"{MODULE}::test_the_openai_client_gets_engine_generate_s_tokens_streamed_and_not"
LOAD = (f"{MODULE}::"
        "test_64_concurrent_streams_each_get_their_own_prompt_s_tokens_and_the_engine_ends_empty")
USAGE = f"{MODULE}::test_include_usage_counts_the_prompt_and_the_answer_in_tokens"
STOP = f"{MODULE}::test_a_stop_string_across_tokens_ends_the_text_at_its_first_character"
SEEDS = f"{MODULE}::test_seeded_sampling_repeats_and_draws_what_the_engine_draws"
GONE = f"{MODULE}::test_a_client_that_goes_is_aborted_before_the_next_step_and_its_blocks_freed"
SIGTERM = f"{MODULE}::test_sigterm_ends_every_running_request_with_an_error_chunk"
BAD = f"{MODULE}::test_bad_input_gets_its_status_and_a_json_error_and_leaves_nothing_behind"
FULL = f"{MODULE}::test_past_the_requests_it_holds_the_server_refuses_with_429_and_queues_nothing"
METRICS = f"{MODULE}::test_metrics_count_what_the_clients_got_and_the_pool_the_engine_holds"
CACHED = f"{MODULE}::test_a_finished_requests_full_blocks_show_as_cached_in_metrics_and_the_feed"
BEHIND = f"{MODULE}::test_a_stream_behind_the_engine_gets_the_waiting_tokens_as_one_piece_in_order"
WINDOW = "spec/test_cli.py::test_the_stream_decoder_decodes_a_few_ids_per_token_however_long_the_answer"
WORKER, APP, PROTOCOL, METRIC = ("torchlet/serve/worker.py", "torchlet/serve/app.py",
                                 "torchlet/serve/protocol.py", "torchlet/serve/metrics.py")
TOKENS, CANCEL, REFUSAL = "served tokens", "served cancellation", "served refusals"
STATE = "served engine state"

MUTANTS = [
    Mutant("serve-waiting-tokens-but-the-last-dropped", TOKENS, (
        Edit(APP, "                    tokens += event[1]\n",
             "                    tokens = list(event[1])\n"),),
        (BEHIND,), (), "a stream behind the engine keeps only the last of the tokens waiting"),
    Mutant("text-decoder-decodes-the-whole-answer-each-token", TOKENS, (
        Edit("torchlet/text.py", "        self.start, self.read = self.read, len(self.ids)\n",
             "        self.read = len(self.ids)\n"),),
        (WINDOW,), (), "each streamed token decodes the answer so far, not a window"),
    Mutant("serve-last-token-dropped", TOKENS, (
        Edit(WORKER, "            if new:\n",
             "            if new and out.state is not RequestState.FINISHED:\n"),),
        (PARITY,), (), "the token of the step that finishes a request never reaches its client"),
    Mutant("serve-tokens-sent-to-the-oldest-request", TOKENS, (
        Edit(WORKER, "                job.emit((\"tokens\", list(new)))\n",
             "                self.jobs[min(self.jobs)].emit((\"tokens\", list(new)))\n"),),
        (LOAD,), (), "every request's tokens go to the client of the oldest one running"),
    Mutant("serve-stop-string-looked-for-in-each-piece-alone", TOKENS, (
        Edit(PROTOCOL, "(i := self.pending.find(s)) >= 0]", "(i := text.find(s)) >= 0]"),),
        (STOP,), (), "a stop string is found only within one token's text, never across tokens"),
    Mutant("serve-usage-counts-one-more", TOKENS, (
        Edit(APP, "        return protocol.usage(len(self.job.prompt), self.count)\n",
             "        return protocol.usage(len(self.job.prompt), self.count + 1)\n"),),
        (USAGE,), (), "completion_tokens counts the end of the answer as a token"),
    Mutant("serve-seed-dropped", TOKENS, (
        Edit(PROTOCOL, "        top_p=request.top_p, min_p=request.min_p, seed=request.seed)\n",
             "        top_p=request.top_p, min_p=request.min_p, seed=None)\n"),),
        (SEEDS,), (), "a request's seed never reaches the engine"),
    Mutant("serve-first-token-timed-as-an-inter-token-gap", TOKENS, (
        Edit(METRIC, "            gaps = [0.0] * (n - 1)\n", "            gaps = [0.0] * n\n"),),
        (METRICS,), (), "/metrics counts one inter-token latency per token, the first included"),
    Mutant("serve-dropped-stream-keeps-running", CANCEL, (
        Edit(APP, "        finally:  # the client went, or the stream ended: abort it if it still "
                  "runs\n            self.served.worker.cancel(self.job)\n",
             "        finally:\n            pass\n"),),
        (GONE,), (), "a stream whose client went runs on to its end"),
    Mutant("serve-abort-leaves-the-engine-running", CANCEL, (
        Edit(WORKER, "        self.engine.abort(job.request_id)\n        self._end(",
             "        self._end("),),
        (GONE,), (), "the client is told its request ended; the engine runs it on, holding blocks"),
    Mutant("serve-shutdown-finishes-instead-of-failing", CANCEL, (
        Edit(APP, "                body = ApiError(kind, self.error, kind=\"server_error\").body()\n"
                  "                yield f\"data: {json.dumps(body)}\\n\\n\"\n",
             "                yield self.chunk(None, \"stop\", usage)\n"),),
        (SIGTERM,), (), "a request cut by SIGTERM ends as if it had finished"),
    Mutant("serve-any-model-name-served", REFUSAL, (
        Edit(APP, "    if body.model != model.name:\n", "    if False:\n"),),
        (BAD,), (), "a request for a model the server lacks is answered by its own"),
    Mutant("serve-n-ignored", REFUSAL, (
        Edit(PROTOCOL, "    if request.n != 1:\n", "    if False:\n"),),
        (f"{BAD}[n above 1]",), (), "n > 1 gets one choice instead of a refusal"),
    Mutant("serve-queued-before-checked", REFUSAL, (
        Edit(APP, "    settings = protocol.params(body, len(prompt), ",
             "    served.submit(prompt, protocol.GenerationParams(max_new_tokens=1))\n"
             "    settings = protocol.params(body, len(prompt), "),),
        (BAD,), (), "a refused request has already queued a one-token request"),
    Mutant("serve-no-limit-on-queued-requests", REFUSAL, (
        Edit(APP, "        if self.queued >= self.most:\n", "        if False:\n"),),
        (FULL,), (), "a server past the requests it holds queues one more instead of a 429"),
    Mutant("serve-ended-requests-still-counted", REFUSAL, (
        Edit(APP, "            self.queued -= 1\n", "            pass\n"),),
        (FULL,), (), "an ended request still counts against the limit: a server that was full "
                     "refuses every request after"),
    Mutant("serve-used-blocks-counted-as-the-free-ones", STATE, (
        Edit(METRIC, "            g.add_metric([\"used\"], pool[\"num_used\"])\n",
             "            g.add_metric([\"used\"], pool[\"num_free\"])\n"),),
        (METRICS,), (), "/metrics reports the free blocks as used"),
    Mutant("serve-cached-blocks-counted-as-the-free-ones", STATE, (
        Edit(METRIC, "            g.add_metric([\"cached\"], len(s[\"cached\"]))\n",
             "            g.add_metric([\"cached\"], pool[\"num_free\"])\n"),),
        (CACHED,), (), "/metrics counts every free block as cached, a prefix's K/V or not"),
    Mutant("serve-feed-lists-no-cached-block", STATE, (
        Edit(WORKER, "            \"cached\": self.engine.cached_blocks() if self.prefix "
                     "else None,",
             "            \"cached\": [] if self.prefix else None,"),),
        (CACHED,), (), "the page's feed lists no cached block: the grid shows them free"),
    Mutant("serve-finished-requests-never-taken", STATE, (
        Edit(WORKER, "        self.engine.take(job.request_id)  # finished and taken: it leaves the "
                     "engine\n", ""),),
        (LOAD,), (), "a finished request stays in the engine's table: the server's memory grows "
        "with every request it served"),
    Mutant("serve-json-limits-uncaught", REFUSAL, (
        Edit(PROTOCOL, "    except RecursionError:\n        raise ApiError(400, \"the request body is "
                       "nested too deeply\") from None\n    except ValueError as e:",
             "    except ZeroDivisionError as e:"),),
        # the cases it breaks: the spec's other cases cost a server's requests each first
        (f"{BAD}[JSON nested 100,000 deep]", f"{BAD}[a 5,000-digit integer]"), (),
        "JSON nested too deep or an integer past 4,300 digits reaches a 500 with a traceback"),
    Mutant("serve-lone-surrogates-reach-the-tokenizer", REFUSAL, (
        Edit(PROTOCOL, "        json.dumps(data, ensure_ascii=False).encode(\"utf-8\")\n",
             "        pass\n"),),
        (f"{BAD}[a lone surrogate]",), (),
        "a lone surrogate in a message reaches the chat template: a 500"),
    Mutant("serve-tokenizes-on-the-event-loop", REFUSAL, (
        Edit(APP, "    prompt = await asyncio.to_thread(protocol.prompt_of, body, model.tokenizer,\n"
                  "                                     model.vocab_size)",
             "    prompt = protocol.prompt_of(body, model.tokenizer, model.vocab_size)"),),
        (f"{MODULE}::test_a_prompt_being_tokenized_does_not_hold_up_another_clients_request",),
        (), "a prompt is tokenized on the event loop: every other client waits for it"),
]
