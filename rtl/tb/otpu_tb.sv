// otpu_tb: runs one program on otpu_core against otpu_dram_model and dumps the machine state.
//
// Plusargs: +image=FILE (DRAM segments: {first beat, beat count} as big-endian words, then the
// beats, each byte-reversed so that $fread puts DRAM byte 0 in bits [7:0]); +tmem=FILE and +act=FILE
// (the state a previous run left, big-endian words; optional); +prog_addr, +prog_n, +arg0..+arg7
// (hex); +max_cycles; +out=PREFIX. Writes PREFIX.dram (every written beat: its index as a
// little-endian word, then its bytes), PREFIX.tmem, PREFIX.act (little-endian words) and
// PREFIX.stats (key value lines).
module otpu_tb;
  parameter int D = 32;
  parameter int MCOLS = 2;
  parameter int LANES = 4;
  parameter int ACT_BLOCKS = 16;
  parameter int ACT_ROWS = 0;
  parameter int TMEM_WORDS = 8192;
  parameter int IMEM_WORDS = 8192;
  parameter int DSTEP = 0;
  parameter int STREAM = 0;
  parameter int PAIR = 0;
  parameter int SEQ_WC = 0;
  parameter int WIN = 8;
  parameter int FIFO_DEPTH = 64;
  parameter int TMEM_IMPL = 2;
  parameter int MXU_LATENCY = 7;
  parameter int COMPOSITE_COLS_PER_CYCLE = 2;
  parameter int DRAM_BYTES_PER_CYCLE = 32;
  parameter int VT_APPEND_CYCLES = 8;
  parameter int DRAM_LOG2 = 24;
  parameter int DRAM_LATENCY = 30;
  parameter int DRAM_RATE_Q8 = 6554;
  localparam int BB = DRAM_BYTES_PER_CYCLE;
  localparam int ROWS = ACT_ROWS != 0 ? ACT_ROWS : MCOLS;
  localparam longint DRAM_BYTES = longint'(1) << DRAM_LOG2;

  logic clk = 0;
  always #1 clk = ~clk;
  logic rst = 1, start = 0;
  logic [31:0] prog_addr, prog_n;
  logic [7:0][31:0] args;
  logic running, halted;
  logic [7:0] error;
  logic [31:0] error_pc, icount, tmem_deny;
  logic [63:0] cycles, read_beats, write_beats;
  logic m_valid, m_write, m_ready, r_valid, r_write, range_error;
  logic [31:0] m_addr;
  logic [BB*8-1:0] m_wdata, r_data;
  logic [BB-1:0] m_wstrb;
  logic [15:0] m_bytes;
  logic [2:0] m_tag, r_tag;

  otpu_core #(.D(D), .MCOLS(MCOLS), .LANES(LANES), .ACT_BLOCKS(ACT_BLOCKS), .ACT_ROWS(ACT_ROWS),
              .TMEM_WORDS(TMEM_WORDS), .IMEM_WORDS(IMEM_WORDS), .DSTEP(DSTEP), .STREAM(STREAM), .PAIR(PAIR), .SEQ_WC(SEQ_WC), .WIN(WIN),
              .FIFO_DEPTH(FIFO_DEPTH), .TMEM_IMPL(TMEM_IMPL), .MXU_LATENCY(MXU_LATENCY),
              .COMPOSITE_COLS_PER_CYCLE(COMPOSITE_COLS_PER_CYCLE), .DRAM_BYTES_PER_CYCLE(BB),
              .VT_APPEND_CYCLES(VT_APPEND_CYCLES), .DRAM_LOG2(DRAM_LOG2), .DRAM_LATENCY(DRAM_LATENCY),
              .DRAM_RATE_Q8(DRAM_RATE_Q8)) u_core (
    .clk, .rst, .start, .prog_addr, .prog_n, .args, .running, .halted, .error, .error_pc, .icount, .cycles,
    .tmem_deny, .m_valid, .m_write, .m_addr, .m_wdata, .m_wstrb, .m_bytes, .m_tag, .m_ready, .r_valid,
    .r_write, .r_tag, .r_data);

  otpu_dram_model #(.BB(BB), .BYTES(DRAM_BYTES), .LATENCY(DRAM_LATENCY), .RATE_Q8(DRAM_RATE_Q8)) u_dram (
    .clk, .rst, .m_valid, .m_write, .m_addr, .m_wdata, .m_wstrb, .m_bytes, .m_tag, .m_ready, .r_valid,
    .r_write, .r_tag, .r_data, .range_error, .read_beats, .write_beats);

  string fn, out;
  integer fd, got, nseg;
  logic [31:0] hdr [2];
  logic [BB*8-1:0] beat;
  logic [31:0] word;
  longint max_cycles;

  // +trace: one line per dispatch, unit start and unit completion
  bit trace;
  initial trace = $test$plusargs("trace");
  always @(posedge clk) if (trace && running) begin
    if (u_core.u_seq.dispatch_ok && u_core.u_seq.state == 2)
      $display("T D c=%0d pc=%0d op=%02x", cycles, u_core.u_seq.pc, u_core.u_seq.op);
    for (int u = 0; u < 5; u++) begin
      if (u_core.u_take[u]) $display("T S c=%0d u=%0d", cycles, u);
      if (u_core.u_done[u]) $display("T E c=%0d u=%0d", cycles, u);
    end
  end

  task automatic load_image(string name);
    integer f, g;
    logic [31:0] h0, h1;
    f = $fopen(name, "rb");
    if (f == 0) $fatal(1, "otpu_tb: cannot open %s", name);
    forever begin
      g = $fread(h0, f);
      if (g < 4) break;
      g = $fread(h1, f);
      for (int i = 0; i < h1; i++) begin
        g = $fread(beat, f);
        u_dram.mem[h0 + i] = beat;
      end
    end
    $fclose(f);
  endtask

  task automatic dump(string prefix);
    integer f;
    f = $fopen({prefix, ".dram"}, "wb");
    for (longint b = 0; b < DRAM_BYTES / BB; b++)
      if (u_dram.dirty[b]) begin
        $fwrite(f, "%u", 32'(b));
        for (int k = 0; k < BB / 4; k++) $fwrite(f, "%u", u_dram.mem[b][32 * k +: 32]);
      end
    $fclose(f);
    f = $fopen({prefix, ".tmem"}, "wb");
    for (int i = 0; i < TMEM_WORDS; i++) $fwrite(f, "%u", u_core.u_tmem.mem[i]);
    $fclose(f);
    f = $fopen({prefix, ".act"}, "wb");
    for (int r = 0; r < ROWS; r++)
      for (int b = 0; b < ACT_BLOCKS; b++) begin
        for (int k = 0; k < D / 4; k++) $fwrite(f, "%u", u_core.u_act.q[r][b][32 * k +: 32]);
        $fwrite(f, "%u", u_core.u_act.scale[r][b]);
        $fwrite(f, "%u", {16'd0, u_core.u_act.sub[r][b]});
      end
    $fclose(f);
    f = $fopen({prefix, ".stats"}, "w");
    $fwrite(f, "halted %0d\nerror %0d\nerror_pc %0d\ncycles %0d\nicount %0d\n", halted, error, error_pc, cycles, icount);
    $fwrite(f, "dram_read_beats %0d\ndram_write_beats %0d\ndram_range_error %0d\ntmem_deny %0d\n",
            read_beats, write_beats, range_error, tmem_deny);
    $fclose(f);
  endtask

  initial begin
    if (!$value$plusargs("out=%s", out)) $fatal(1, "otpu_tb: +out=PREFIX is required");
    if (!$value$plusargs("prog_addr=%h", prog_addr)) prog_addr = 0;
    if (!$value$plusargs("prog_n=%d", prog_n)) prog_n = 0;
    if (!$value$plusargs("max_cycles=%d", max_cycles)) max_cycles = 100000000;
    for (int i = 0; i < 8; i++) begin
      string key;
      key = $sformatf("arg%0d=%%h", i);
      if (!$value$plusargs(key, args[i])) args[i] = 0;
    end
    for (longint b = 0; b < DRAM_BYTES / BB; b++) begin
      u_dram.mem[b] = '0;
      u_dram.dirty[b] = 1'b0;
    end
    for (int i = 0; i < TMEM_WORDS; i++) u_core.u_tmem.mem[i] = 0;
    if ($value$plusargs("image=%s", fn)) load_image(fn);
    if ($value$plusargs("tmem=%s", fn)) begin
      fd = $fopen(fn, "rb");
      for (int i = 0; i < TMEM_WORDS; i++) begin got = $fread(word, fd); u_core.u_tmem.mem[i] = word; end
      $fclose(fd);
    end
    if ($value$plusargs("act=%s", fn)) begin
      fd = $fopen(fn, "rb");
      for (int r = 0; r < ROWS; r++)
        for (int b = 0; b < ACT_BLOCKS; b++) begin
          for (int k = 0; k < D / 4; k++) begin got = $fread(word, fd); u_core.u_act.q[r][b][32 * k +: 32] = word; end
          got = $fread(word, fd); u_core.u_act.scale[r][b] = word;
          got = $fread(word, fd); u_core.u_act.sub[r][b] = word[15:0];
        end
      $fclose(fd);
    end
    repeat (3) @(posedge clk);
    rst = 0;
    @(negedge clk);
    start = 1;
    @(negedge clk);
    start = 0;
    while (running && !range_error && cycles < max_cycles) @(negedge clk);
    if (range_error) $display("otpu_tb: DRAM access outside the model's %0d bytes", DRAM_BYTES);
    if (running) $display("otpu_tb: still running after %0d cycles", cycles);
    dump(out);
    $finish;
  end
endmodule
