/**
 * What the publisher API tests (counters_api*.test.ts) share: one gateway for the tests of a
 * describe block, with a publisher client of it, and the error code an answer carries.
 */
import { afterAll, beforeAll } from "vitest";
import { TEST_PUBLISHER_KEY, TestPlatform } from "../../../test/support/platform.js";
import { PublisherHttp, type ErrorBody } from "../../../test/support/publisher_http.js";

export function codeOf(body: unknown): string | undefined {
  return (body as Partial<ErrorBody>).error?.code;
}

/** A gateway (uWS on a free port, counter node, in-memory bus and store) and its publisher client. */
export interface PublisherGateway {
  readonly platform: TestPlatform;
  readonly api: PublisherHttp;
}

/**
 * Starts a gateway before the tests of the enclosing describe block and closes it after them. Its
 * platform and client are there from the first test on.
 */
export function publisherGateway(): PublisherGateway {
  let started: PublisherGateway | undefined;

  beforeAll(async () => {
    const platform = await TestPlatform.start();
    started = { platform, api: new PublisherHttp(platform.url, TEST_PUBLISHER_KEY) };
  });

  afterAll(async () => {
    await started?.platform.close();
  });

  const running = (): PublisherGateway => {
    if (started === undefined) throw new Error("the gateway is started before the tests, not before");
    return started;
  };
  return {
    get platform() {
      return running().platform;
    },
    get api() {
      return running().api;
    },
  };
}
