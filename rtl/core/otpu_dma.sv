// otpu_dma: the DMA unit: LD (DRAM words -> TMEM), ST (TMEM words -> DRAM), WAITW (poll a
// DRAM word until a compare holds, then copy it to TMEM), DSTEP and STREAM (the stream engine
// otpu_stream, on targets built with either). One instruction at a time, in order.
//
// DRAM traffic is whole beats of BB bytes (the unit owns the DRAM port while its instruction holds
// the head ticket); `req_bytes` is the useful bytes of each beat, which the memory charges
// against its bandwidth. Reads land in a FIFO of FIFO_DEPTH beats (requests are issued only
// while their data has room) and leave it up to 2 x LANES words per cycle into TMEM (two write
// ports, so a beat lands as fast as the DRAM delivers it), paced so that an LD never places more
// than LANES words per cycle since its start (the unit's rate in the timing model); ST reads TMEM 2 x LANES
// words per cycle (two read ports) and assembles them into beats with byte strobes. An instruction completes
// when its last TMEM write has landed (LD, WAITW) or its last DRAM write is acknowledged (ST).
module otpu_dma
#(
  parameter int BB = 32,
  parameter int LANES = 4,
  parameter int FIFO_DEPTH = 64,
  parameter int D = 32,
  parameter int DSTEP = 0,
  parameter int STREAM = 0,
  parameter int TMEM_WORDS = 8192,
  parameter int DRAM_LOG2 = 24
) (
  input  logic                   clk,
  input  logic                   rst,
  // instruction
  input  logic                   in_valid,
  input  logic [7:0][31:0]       in_w,
  output logic                   take,
  output logic                   release_o,
  output logic                   done,
  output logic                   err,
  output logic [7:0]             err_code,
  // DRAM
  output logic                   req_valid,
  output logic                   req_write,
  output logic [31:0]            req_addr,
  output logic [BB*8-1:0]        req_wdata,
  output logic [BB-1:0]          req_wstrb,
  output logic [15:0]            req_bytes,
  input  logic                   req_ready,
  output logic                   dram_pop,
  input  logic                   resp_valid,
  input  logic                   resp_write,
  input  logic [BB*8-1:0]        resp_rdata,
  // TMEM
  output logic [2*LANES-1:0]       rd_en,
  output logic [2*LANES-1:0][31:0] rd_addr,
  input  logic [1:0]               rd_gnt,
  input  logic [2*LANES-1:0][31:0] rd_data,
  output logic [2*LANES-1:0]       wr_en,
  output logic [2*LANES-1:0][31:0] wr_addr,
  output logic [2*LANES-1:0][31:0] wr_data
);
  `include "otpu_defs.svh"
  localparam int WPB = BB / 4;
  localparam int FW = $clog2(FIFO_DEPTH + 1);
  localparam int LDW = 2 * LANES;          // LD words per cycle at most

  typedef enum logic [2:0] {S_IDLE, S_LD, S_ST, S_WAITW, S_WAITW_GAP, S_DONE, S_STREAM} state_t;
  state_t state;
  logic [7:0][31:0] w;
  logic [31:0] dram0, tmem0, nwords;
  logic [31:0] beat_first, beat_last, beat_next;     // beat indices of the transfer
  logic [31:0] acked, placed, issued_words;

  assign dram0 = w[1];
  assign tmem0 = w[2];
  assign nwords = w[3];

  // useful bytes of beat b of [dram0, dram0 + 4 n)
  function automatic logic [15:0] useful(input logic [31:0] b, input logic [31:0] lo, input logic [31:0] hi);
    logic [31:0] s, e;
    s = b * BB > lo ? b * BB : lo;
    e = (b + 1) * BB < hi ? (b + 1) * BB : hi;
    useful = e > s ? 16'(e - s) : 16'd0;
  endfunction

  // -- LD: response FIFO and the word window --------------------------------------------------------
  logic [BB*8-1:0] fifo [FIFO_DEPTH];
  logic [FW-1:0]   f_count, f_head, f_tail;
  logic [FW-1:0]   outstanding;            // read requests whose data has not arrived
  localparam int WINW = 2 * (WPB > LDW ? WPB : LDW);
  logic [31:0]     win_words [WINW];
  logic [$clog2(WINW + 1)-1:0] win_n;
  logic [31:0]     beats_taken;            // beats moved from the FIFO into the window
  logic            pop_beat;
  logic [31:0]     skip;                   // leading words of the first beat

  // -- ST: beat assembly -------------------------------------------------------------------------------
  localparam int SBQ = 8;
  logic [BB*8-1:0] sb_data [SBQ];
  logic [BB-1:0]   sb_strb [SBQ];
  logic [31:0]     sb_beat [SBQ];
  logic [3:0]      sb_n;
  logic [BB*8-1:0] cur_data;
  logic [BB-1:0]   cur_strb;
  logic [31:0]     cur_beat;
  logic            cur_any;
  logic            st_rd_pending;
  logic [31:0]     st_rd_base;
  logic [$clog2(2*LANES+1)-1:0] st_rd_k;
  logic [31:0]     writes_issued, writes_total;
  // words of this cycle's ST read that count: both ports granted, or the low port alone (the
  // high port's words are read again next cycle from the low one; TMEM_IMPL 3 denies it when
  // the two read the same banks)
  logic [$clog2(2*LANES+1)-1:0] st_got;
  assign st_got = !rd_gnt[0] ? '0 : (rd_gnt[1] ? $bits(st_got)'($countones(rd_en))
                                              : $bits(st_got)'($countones(rd_en[LANES-1:0])));

  // -- WAITW ---------------------------------------------------------------------------------------------
  logic [31:0] polls, gap, value;
  logic        wait_rd_out;

  logic ld_issue, st_issue, ww_issue, ww_write, holds, st_release, st_take, st_finish;
  logic            head_ok;                // a beat to append: the FIFO's head, or a response arriving now
  logic [BB*8-1:0] head_data;
  logic [31:0]     cw [WINW];              // the window with this cycle's beat appended
  logic [31:0]     cw_n;
  assign ww_write = state == S_WAITW_GAP && holds;
  logic [7:0] in_op;  // a named slice: yosys reads no part-select of a packed array element as a case subject
  assign in_op = in_w[0][7:0];
  assign st_take = take && in_op == OP_ST;
  // an ST completes in the cycle its last write is acknowledged (DRAM holds the data by then)
  assign st_finish = state == S_ST && (nwords == 0 || (acked + (resp_valid && resp_write ? 1 : 0) >= writes_total
                     && writes_issued >= writes_total && elapsed + 1 >= (nwords + LANES - 1) / LANES && writes_total != 0));
  assign take = (state == S_IDLE || state == S_DONE || st_finish) && in_valid;
  assign done = state == S_DONE || st_finish || (state == S_STREAM && x_finish);
  assign release_o = (state == S_DONE && w[0][7:0] != OP_ST) || st_release || (state == S_STREAM && x_finish);
  logic [LDW-1:0] ld_wr_en;
  logic [$clog2(LDW+1)-1:0] ld_k;
  logic [31:0] remaining, elapsed, allowed;

  always_comb begin
    // DRAM requests
    ld_issue = state == S_LD && nwords != 0 && beat_next <= beat_last && 32'(outstanding) + 32'(f_count) < FIFO_DEPTH;
    st_issue = state == S_ST && sb_n != 0;
    ww_issue = state == S_WAITW && !wait_rd_out && gap == 0;
    req_valid = ld_issue || st_issue || ww_issue;
    req_write = st_issue;
    req_addr = st_issue ? sb_beat[0] * BB : (ww_issue ? (dram0 / BB) * BB : beat_next * BB);
    req_wdata = sb_data[0];
    req_wstrb = sb_strb[0];
    req_bytes = st_issue ? 16'($countones(sb_strb[0])) : (ww_issue ? 16'd4 : useful(beat_next, dram0, dram0 + 4 * nwords));
    dram_pop = (ld_issue && req_ready && beat_next == beat_last) ||
               (st_issue && req_ready && writes_issued + 1 == writes_total) ||
               (state == S_LD && nwords == 0 && beat_next == beat_first) || ww_write;
    // LD: a beat joins the window (from the FIFO, or straight from DRAM when the FIFO is empty)
    // and the window's first words go to TMEM in the same cycle
    head_ok = f_count != 0 || (resp_valid && !resp_write);
    head_data = f_count != 0 ? fifo[f_head] : resp_rdata;
    pop_beat = state == S_LD && head_ok && 32'(win_n) + WPB <= WINW && beats_taken < beat_last - beat_first + 1;
    for (int i = 0; i < WINW; i++) cw[i] = win_words[i];
    cw_n = 32'(win_n);
    if (pop_beat) begin
      for (int i = 0; i < WPB; i++)
        if (beats_taken != 0 || i >= skip) cw[cw_n + i - (beats_taken == 0 ? skip : 0)] = head_data[32 * i +: 32];
      cw_n = cw_n + WPB - (beats_taken == 0 ? skip : 0);
    end
    // paced at LANES words a cycle counting the cycle it started (the model's n / LANES from its start)
    remaining = nwords - placed;
    allowed = LANES * (elapsed + 2) - placed;
    ld_k = 0;
    ld_wr_en = '0;
    for (int l = 0; l < LDW; l++) begin
      wr_addr[l] = tmem0 + placed + l;
      wr_data[l] = cw[l];
      if (state == S_LD && 32'(l) < cw_n && 32'(l) < remaining && 32'(l) < allowed) begin
        ld_wr_en[l] = 1'b1;
        ld_k = ld_k + 1;
      end
    end
    wr_en = ld_wr_en;
    if (ww_write) begin
      wr_en[0] = 1'b1;
      wr_addr[0] = w[2];
      wr_data[0] = value;
    end
    // ST: read 2 x LANES words per cycle (two read ports) while the beat queue has room
    // (the first read goes out in the cycle the ST is taken: its producers' data is in TMEM by then)
    rd_en = '0;
    for (int l = 0; l < 2 * LANES; l++) rd_addr[l] = st_take ? in_w[2] + l : tmem0 + issued_words + l;
    if (st_take)
      for (int l = 0; l < 2 * LANES; l++) rd_en[l] = 32'(l) < in_w[3];
    else if (state == S_ST && issued_words < nwords && 32'(sb_n) + (st_rd_pending ? 3 : 0) + 3 <= SBQ)
      for (int l = 0; l < 2 * LANES; l++) rd_en[l] = 32'(l) < nwords - issued_words;
    // the stream engine owns the ports while it runs
    if (state == S_STREAM) begin
      req_valid = x_req_valid; req_write = x_req_write; req_addr = x_req_addr; req_wdata = x_req_wdata;
      req_wstrb = x_req_wstrb; req_bytes = x_req_bytes; dram_pop = x_dram_pop;
      rd_en = '0;
      rd_en = x_rd_en;
      rd_addr = x_rd_addr;
      wr_en = '0;
      wr_en[0] = x_wr_en; wr_addr[0] = x_wr_addr; wr_data[0] = x_wr_data;
    end
  end

  // -- DSTEP and STREAM ----------------------------------------------------------------------------------
  logic                   x_finish, x_err, x_req_valid, x_req_write, x_dram_pop, x_wr_en;
  logic [7:0]             x_err_code;
  logic [31:0]            x_req_addr, x_wr_addr, x_wr_data;
  logic [BB*8-1:0]        x_req_wdata;
  logic [BB-1:0]          x_req_wstrb;
  logic [15:0]            x_req_bytes;
  logic [2*LANES-1:0]       x_rd_en;
  logic [2*LANES-1:0][31:0] x_rd_addr;
  if (DSTEP != 0 || STREAM != 0) begin : g_stream
    logic x_busy;
    otpu_stream #(.BB(BB), .LANES(LANES), .D(D), .TMEM_WORDS(TMEM_WORDS), .DRAM_LOG2(DRAM_LOG2)) u_stream (
      .clk, .rst, .start(take && (in_op == OP_DSTEP || in_op == OP_STREAM)), .in_w, .busy(x_busy), .finish(x_finish),
      .err(x_err), .err_code(x_err_code), .req_valid(x_req_valid), .req_write(x_req_write), .req_addr(x_req_addr),
      .req_wdata(x_req_wdata), .req_wstrb(x_req_wstrb), .req_bytes(x_req_bytes), .req_ready, .dram_pop(x_dram_pop),
      .resp_valid, .resp_write, .resp_rdata, .rd_en(x_rd_en), .rd_addr(x_rd_addr), .rd_gnt,
      .rd_data,
      .wr_en(x_wr_en), .wr_addr(x_wr_addr), .wr_data(x_wr_data));
  end else begin : g_no_stream
    assign x_finish = 1'b0; assign x_err = 1'b0; assign x_err_code = E_NONE;
    assign x_req_valid = 1'b0; assign x_req_write = 1'b0; assign x_req_addr = '0; assign x_req_wdata = '0;
    assign x_req_wstrb = '0; assign x_req_bytes = '0; assign x_dram_pop = 1'b0;
    assign x_rd_en = '0; assign x_rd_addr = '0; assign x_wr_en = 1'b0; assign x_wr_addr = '0; assign x_wr_data = '0;
  end

  always_comb begin
    logic [31:0] v, ref_, mask, w0;
    v = value;
    ref_ = w[3];
    mask = w[4];
    w0 = w[0];            // named (as in_op): yosys reads no part-select of an array element as a case subject
    case (w0[25:24])
      2'd0: holds = (v & mask) == ref_;
      2'd1: holds = (v & mask) != ref_;
      default: holds = !(32'((v & mask) - ref_) >> 31);
    endcase
  end

  always_ff @(posedge clk) begin
    if (rst) begin
      state <= S_IDLE;
      st_release <= 1'b0;
      err <= 1'b0;
      err_code <= E_NONE;
      f_count <= 0; f_head <= 0; f_tail <= 0; outstanding <= 0;
    end else begin
      st_release <= 1'b0;
      elapsed <= elapsed + 1;
      case (state)
        S_IDLE, S_DONE: state <= S_IDLE;
        S_STREAM: if (x_err) begin
          err <= 1'b1;
          err_code <= x_err_code;
          state <= S_IDLE;
        end else if (x_finish) state <= S_IDLE;
        S_LD: begin
          if (ld_issue && req_ready) beat_next <= beat_next + 1;
          if (nwords == 0 && beat_next == beat_first) beat_next <= beat_last + 1;
          // FIFO (a response popped in the cycle it arrives bypasses it)
          if (resp_valid && !resp_write && !(pop_beat && f_count == 0)) begin
            fifo[f_tail] <= resp_rdata;
            f_tail <= f_tail == FW'(FIFO_DEPTH - 1) ? 0 : f_tail + 1;
          end
          f_count <= f_count + FW'(resp_valid && !resp_write && !(pop_beat && f_count == 0)) - FW'(pop_beat && f_count != 0);
          outstanding <= outstanding + FW'(ld_issue && req_ready) - FW'(resp_valid && !resp_write);
          // the window: the combined words less the ld_k written
          for (int i = 0; i < WINW; i++) win_words[i] <= i + ld_k < WINW ? cw[i + ld_k] : 32'd0;
          win_n <= $bits(win_n)'(cw_n - 32'(ld_k));
          if (pop_beat) begin
            if (f_count != 0) f_head <= f_head == FW'(FIFO_DEPTH - 1) ? 0 : f_head + 1;
            beats_taken <= beats_taken + 1;
          end
          placed <= placed + 32'(ld_k);
          if (placed + 32'(ld_k) >= nwords && beat_next > beat_last) begin
            state <= S_DONE;
          end
        end
        S_ST: begin
          // TMEM reads in flight come back the next cycle
          if (st_got != 0) begin
            st_rd_pending <= 1'b1;
            st_rd_base <= issued_words;
            st_rd_k <= st_got;
            issued_words <= issued_words + 32'(st_got);
            if (issued_words + 32'(st_got) >= nwords) st_release <= 1'b1;
          end else st_rd_pending <= 1'b0;
          begin
            logic [BB*8-1:0] cd;
            logic [BB-1:0] cs;
            logic [31:0] cb;
            logic ca;
            logic [3:0] n;
            logic [BB*8-1:0] qd [SBQ];
            logic [BB-1:0] qs [SBQ];
            logic [31:0] qb [SBQ];
            for (int i = 0; i < SBQ; i++) begin qd[i] = sb_data[i]; qs[i] = sb_strb[i]; qb[i] = sb_beat[i]; end
            n = sb_n;
            if (st_issue && req_ready) begin
              for (int i = 0; i < SBQ - 1; i++) begin qd[i] = qd[i + 1]; qs[i] = qs[i + 1]; qb[i] = qb[i + 1]; end
              n = n - 1;
              writes_issued <= writes_issued + 1;
            end
            cd = cur_data; cs = cur_strb; cb = cur_beat; ca = cur_any;
            if (st_rd_pending)
              for (int l = 0; l < 2 * LANES; l++)
                if (l < st_rd_k) begin
                  logic [31:0] a, b;
                  a = dram0 + 4 * (st_rd_base + l);
                  b = a / BB;
                  if (ca && b != cb) begin
                    qd[n] = cd; qs[n] = cs; qb[n] = cb; n = n + 1;
                    cs = '0; ca = 1'b0;
                  end
                  cb = b;
                  ca = 1'b1;
                  cd[8 * (a % BB) +: 32] = rd_data[l];
                  cs[(a % BB) +: 4] = 4'hF;
                  // a beat leaves as soon as its last word (or the transfer's) is in
                  if ((a % BB) == BB - 4 || st_rd_base + 32'(l) + 1 >= nwords) begin
                    qd[n] = cd; qs[n] = cs; qb[n] = cb; n = n + 1;
                    cs = '0; ca = 1'b0;
                  end
                end
            for (int i = 0; i < SBQ; i++) begin sb_data[i] <= qd[i]; sb_strb[i] <= qs[i]; sb_beat[i] <= qb[i]; end
            sb_n <= n;
            cur_data <= cd; cur_strb <= cs; cur_beat <= cb; cur_any <= ca;
          end
          if (resp_valid && resp_write) acked <= acked + 1;
          // (and not before LANES words a cycle since the start: the unit's rate in the timing model)
          if (st_finish) state <= S_IDLE;
        end
        S_WAITW: begin
          if (ww_issue && req_ready) wait_rd_out <= 1'b1;
          if (resp_valid && !resp_write && wait_rd_out) begin
            value <= resp_rdata[8 * (dram0 % BB) +: 32];
            wait_rd_out <= 1'b0;
            state <= S_WAITW_GAP;
          end
        end
        S_WAITW_GAP: begin
          if (holds) state <= S_DONE;
          else begin
            polls <= polls + 1;
            if (w[6] != 0 && (polls + 1) * (w[5] > 1 ? w[5] : 1) >= w[6]) begin
              err <= 1'b1;
              err_code <= E_WAITW_TIMEOUT;
              state <= S_IDLE;
            end else begin
              gap <= w[5];
              state <= S_WAITW;
            end
          end
        end
        default: state <= S_IDLE;
      endcase
      if (state == S_WAITW && gap != 0) gap <= gap - 1;
      if (take) begin
        w <= in_w;
        beat_first <= in_w[1] / BB;
        beat_next <= in_w[1] / BB;
        beat_last <= in_w[3] == 0 ? in_w[1] / BB : (in_w[1] + 4 * in_w[3] - 1) / BB;
        acked <= 0; placed <= 0; issued_words <= 0; beats_taken <= 0; elapsed <= 0;
        win_n <= 0;
        skip <= (in_w[1] % BB) / 4;
        sb_n <= 0; cur_any <= 1'b0;
        st_rd_pending <= st_take && st_got != 0;
        st_rd_base <= 0;
        st_rd_k <= st_got;
        if (st_take && st_got != 0) begin
          issued_words <= 32'(st_got);
          if (32'(st_got) >= in_w[3]) st_release <= 1'b1;
        end
        writes_issued <= 0;
        writes_total <= in_w[3] == 0 ? 0 : (in_w[1] + 4 * in_w[3] - 1) / BB - in_w[1] / BB + 1;
        polls <= 0; gap <= 0; wait_rd_out <= 1'b0;
        case (in_op)
          OP_LD: state <= S_LD;
          OP_ST: state <= S_ST;
          OP_DSTEP, OP_STREAM: state <= S_STREAM;
          default: state <= S_WAITW;
        endcase
      end

    end
  end
endmodule
