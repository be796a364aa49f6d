// otpu_core: one slice of the machine. The sequencer (otpu_seq) dispatches into the five units
// (DMA, MXU, quantiser, VPU, collective), which share TMEM (otpu_tmem: one read and one write
// port each, VPU three reads) and the ACT RAM (written by the quantiser, read by the MXU), and
// reach DRAM through one port of DRAM_BYTES_PER_CYCLE-byte beats. DRAM is granted in dispatch
// order: a unit owns the port while its instruction holds the head ticket (the program fetch
// owns it while the sequencer loads a program), so transfers are served in issue order.
// Parameters are those of `otpu_core.target.Target.rtl_params()`.
module otpu_core
#(
  parameter int D = 32,
  parameter int MCOLS = 2,
  parameter int LANES = 4,
  parameter int ACT_BLOCKS = 16,
  parameter int ACT_ROWS = 0,
  parameter int TMEM_WORDS = 8192,
  parameter int IMEM_WORDS = 8192,
  parameter int DSTEP = 0,
  parameter int STREAM = 0,
  parameter int PAIR = 0,
  parameter int SEQ_WC = 0,
  parameter int WIN = 8,
  parameter int FIFO_DEPTH = 64,
  parameter int TMEM_IMPL = 2,
  parameter int MXU_LATENCY = 7,
  parameter int COMPOSITE_COLS_PER_CYCLE = 2,
  parameter int DRAM_BYTES_PER_CYCLE = 32,
  parameter int VT_APPEND_CYCLES = 8,
  parameter int DRAM_LOG2 = 24,
  parameter int DRAM_LATENCY = 30,
  parameter int DRAM_RATE_Q8 = 6554
) (
  input  logic             clk,
  input  logic             rst,
  input  logic             start,
  input  logic [31:0]      prog_addr,
  input  logic [31:0]      prog_n,
  input  logic [7:0][31:0] args,
  output logic             running,
  output logic             halted,
  output logic [7:0]       error,
  output logic [31:0]      error_pc,
  output logic [31:0]      icount,
  output logic [63:0]      cycles,
  output logic [31:0]      tmem_deny,
  // DRAM port
  output logic             m_valid,
  output logic             m_write,
  output logic [31:0]      m_addr,
  output logic [DRAM_BYTES_PER_CYCLE*8-1:0] m_wdata,
  output logic [DRAM_BYTES_PER_CYCLE-1:0]   m_wstrb,
  output logic [15:0]      m_bytes,
  output logic [2:0]       m_tag,
  input  logic             m_ready,
  input  logic             r_valid,
  input  logic             r_write,
  input  logic [2:0]       r_tag,
  input  logic [DRAM_BYTES_PER_CYCLE*8-1:0] r_data
);
  `include "otpu_defs.svh"
  localparam int BB = DRAM_BYTES_PER_CYCLE;
  localparam int ROWS = ACT_ROWS != 0 ? ACT_ROWS : MCOLS;
  localparam int NREQ = NUNITS + 1;          // units, then the sequencer's fetch
  localparam int TQ = WIN + 2;

  // -- sequencer and window ---------------------------------------------------------------------
  logic [NUNITS-1:0]             u_valid, u_take, u_release, u_done, u_error;
  logic [NUNITS-1:0][7:0][31:0]  u_words;
  logic [NUNITS-1:0][7:0]        u_error_code;
  logic                          mxu_wr_ok, mxu_queued;
  logic                          ticket_push;
  logic [2:0]                    ticket_unit;
  logic                          rld_rd;
  logic [31:0]                   rld_addr;

  logic [NREQ-1:0]               q_valid, q_write, q_ready, q_pop;
  logic [NREQ-1:0][31:0]         q_addr;
  logic [NREQ-1:0][BB*8-1:0]     q_wdata;
  logic [NREQ-1:0][BB-1:0]       q_wstrb;
  logic [NREQ-1:0][15:0]         q_bytes;
  logic                          fetch_req;

  otpu_seq #(.D(D), .BB(BB), .IMEM_INSTRS(IMEM_WORDS / 8), .TMEM_WORDS(TMEM_WORDS), .WIN(WIN),
             .SEQ_WC(SEQ_WC), .ACT_BLOCKS(ACT_BLOCKS), .DSTEP(DSTEP), .STREAM(STREAM), .DRAM_LOG2(DRAM_LOG2)) u_seq (
    .clk, .rst, .start, .prog_addr, .prog_n, .args, .running, .halted, .error, .error_pc, .icount,
    .fetch_req, .dr_valid(q_valid[U_SEQ]), .dr_addr(q_addr[U_SEQ]), .dr_bytes(q_bytes[U_SEQ]),
    .dr_ready(q_ready[U_SEQ]), .dr_rvalid(r_valid && r_tag == U_SEQ), .dr_rdata(r_data),
    .fetch_done(q_pop[U_SEQ]), .ticket_push, .ticket_unit,
    .u_valid, .mxu_queued, .u_words, .u_take, .u_release, .u_done, .u_error, .u_error_code, .mxu_wr_ok,
    .rld_rd, .rld_addr, .rld_gnt(t_rd_gnt[5]), .rld_data(t_rd_data[5][0]));
  assign q_write[U_SEQ] = 1'b0;
  assign q_wdata[U_SEQ] = '0;
  assign q_wstrb[U_SEQ] = '0;

  always_ff @(posedge clk) begin
    if (rst || start) cycles <= 0;
    else if (running) cycles <= cycles + 1;
  end

  // -- DRAM: tickets in dispatch order ----------------------------------------------------------------
  logic [2:0] tickets [TQ];
  logic [$clog2(TQ+1)-1:0] t_n;
  logic [2:0] owner;
  logic       owned;
  assign owned = fetch_req || t_n != 0;
  assign owner = fetch_req ? U_SEQ : tickets[0];
  always_comb begin
    m_valid = owned && q_valid[owner];
    m_write = q_write[owner];
    m_addr = q_addr[owner];
    m_wdata = q_wdata[owner];
    m_wstrb = q_wstrb[owner];
    m_bytes = q_bytes[owner];
    m_tag = owner;
    for (int u = 0; u < NREQ; u++) q_ready[u] = owned && owner == 3'(u) && m_ready;
  end
  always_ff @(posedge clk) begin
    if (rst) t_n <= 0;
    else begin
      logic pop;
      pop = !fetch_req && t_n != 0 && q_pop[owner];
      if (pop) for (int i = 0; i < TQ - 1; i++) tickets[i] <= tickets[i + 1];
      if (ticket_push) tickets[t_n - (pop ? 1 : 0)] <= ticket_unit;
      t_n <= t_n + (ticket_push ? 1 : 0) - (pop ? 1 : 0);
    end
  end

  // -- TMEM: read ports 0 DMA, 1 MXU, 2 QNT source, 3 VPU A, 4 VPU B, 5 sequencer (RLD) and
  //    collective, 6 QNT scales, 7 DMA's upper lanes; write ports 0 DMA, 1 MXU, 2 VPU, 3 collective,
  //    4 DMA's upper lanes ---------------------------------------------------------------------------
  localparam int NR = 8, NW = 5;
  logic [NR-1:0][LANES-1:0]       t_rd_en;
  logic [NR-1:0][LANES-1:0][31:0] t_rd_addr, t_rd_data;
  logic [NR-1:0]                  t_rd_gnt;
  logic [NW-1:0][LANES-1:0]       t_wr_en;
  logic [NW-1:0][LANES-1:0][31:0] t_wr_addr, t_wr_data;
  logic [LANES-1:0]               coll_rd_en;
  logic [LANES-1:0][31:0]         coll_rd_addr;

  otpu_tmem #(.WORDS(TMEM_WORDS), .LANES(LANES), .NR(NR), .NW(NW), .IMPL(TMEM_IMPL)) u_tmem (
    .clk, .rd_en(t_rd_en), .rd_addr(t_rd_addr), .rd_gnt(t_rd_gnt), .rd_data(t_rd_data),
    .wr_en(t_wr_en), .wr_addr(t_wr_addr), .wr_data(t_wr_data), .deny_count(tmem_deny));

  // the RLD read shares port 5 with the collective (RLD waits while any older instruction runs)
  always_comb begin
    t_rd_en[5] = coll_rd_en;
    t_rd_addr[5] = coll_rd_addr;
    if (rld_rd) begin
      t_rd_en[5] = '0;
      t_rd_en[5][0] = 1'b1;
      t_rd_addr[5][0] = rld_addr;
    end
  end

  // -- ACT RAM ------------------------------------------------------------------------------------------
  logic                       act_we;
  logic [$clog2(ROWS)-1:0]    act_wrow;
  logic [$clog2(ACT_BLOCKS)-1:0] act_wblk;
  logic [D*8-1:0]             act_wq;
  logic [31:0]                act_wscale;
  logic [15:0]                act_wsub;
  logic                       act_wdup;
  logic [$clog2(ROWS)-1:0]    act_wrow2;
  logic [ROWS-1:0][$clog2(ACT_BLOCKS)-1:0] act_rblk;
  logic [ROWS-1:0][D*8-1:0]   act_rq;
  logic [ROWS-1:0][31:0]      act_rscale;
  logic [ROWS-1:0][15:0]      act_rsub;
  otpu_actram #(.D(D), .ROWS(ROWS), .BLOCKS(ACT_BLOCKS)) u_act (
    .clk, .we(act_we), .wrow(act_wrow), .wblk(act_wblk), .wq(act_wq), .wscale(act_wscale), .wsub(act_wsub),
    .wdup(act_wdup), .wrow2(act_wrow2), .rblk(act_rblk), .rq(act_rq), .rscale(act_rscale), .rsub(act_rsub));

  // -- units --------------------------------------------------------------------------------------------
  logic [NREQ-1:0] r_valid_u, r_write_u;
  always_comb for (int u = 0; u < NREQ; u++) begin
    r_valid_u[u] = r_valid && r_tag == 3'(u);
    r_write_u[u] = r_write;
  end

  otpu_dma #(.BB(BB), .LANES(LANES), .FIFO_DEPTH(FIFO_DEPTH), .D(D), .DSTEP(DSTEP), .STREAM(STREAM),
             .TMEM_WORDS(TMEM_WORDS), .DRAM_LOG2(DRAM_LOG2)) u_dma (
    .clk, .rst, .in_valid(u_valid[U_DMA]), .in_w(u_words[U_DMA]), .take(u_take[U_DMA]),
    .release_o(u_release[U_DMA]), .done(u_done[U_DMA]), .err(u_error[U_DMA]), .err_code(u_error_code[U_DMA]),
    .req_valid(q_valid[U_DMA]), .req_write(q_write[U_DMA]), .req_addr(q_addr[U_DMA]), .req_wdata(q_wdata[U_DMA]),
    .req_wstrb(q_wstrb[U_DMA]), .req_bytes(q_bytes[U_DMA]), .req_ready(q_ready[U_DMA]), .dram_pop(q_pop[U_DMA]),
    .resp_valid(r_valid_u[U_DMA]), .resp_write(r_write), .resp_rdata(r_data),
    .rd_en({t_rd_en[7], t_rd_en[0]}), .rd_addr({t_rd_addr[7], t_rd_addr[0]}), .rd_gnt({t_rd_gnt[7], t_rd_gnt[0]}),
    .rd_data({t_rd_data[7], t_rd_data[0]}),
    .wr_en({t_wr_en[4], t_wr_en[0]}), .wr_addr({t_wr_addr[4], t_wr_addr[0]}), .wr_data({t_wr_data[4], t_wr_data[0]}));

  otpu_mxu #(.D(D), .MCOLS(MCOLS), .ROWS(ROWS), .PAIR(PAIR), .LANES(LANES), .ACT_BLOCKS(ACT_BLOCKS), .BB(BB),
             .FIFO_DEPTH(FIFO_DEPTH), .LATENCY(MXU_LATENCY), .DRAM_LATENCY(DRAM_LATENCY),
             .DRAM_RATE_Q8(DRAM_RATE_Q8)) u_mxu (
    .clk, .rst, .in_valid(u_valid[U_MXU]), .in_w(u_words[U_MXU]), .in_queued(mxu_queued), .take(u_take[U_MXU]),
    .release_o(u_release[U_MXU]), .done(u_done[U_MXU]), .err(u_error[U_MXU]), .err_code(u_error_code[U_MXU]),
    .wr_ok(mxu_wr_ok),
    .req_valid(q_valid[U_MXU]), .req_addr(q_addr[U_MXU]), .req_bytes(q_bytes[U_MXU]), .req_ready(q_ready[U_MXU]),
    .dram_pop(q_pop[U_MXU]), .resp_valid(r_valid_u[U_MXU]), .resp_rdata(r_data),
    .act_rblk, .act_rq, .act_rscale, .act_rsub,
    .rd_en(t_rd_en[1]), .rd_addr(t_rd_addr[1]), .rd_gnt(t_rd_gnt[1]), .rd_data(t_rd_data[1]),
    .wr_en(t_wr_en[1]), .wr_addr(t_wr_addr[1]), .wr_data(t_wr_data[1]));
  assign q_write[U_MXU] = 1'b0;
  assign q_wdata[U_MXU] = '0;
  assign q_wstrb[U_MXU] = '0;

  otpu_qnt #(.D(D), .ROWS(ROWS), .MCOLS(MCOLS), .PAIR(PAIR), .LANES(LANES), .ACT_BLOCKS(ACT_BLOCKS), .BB(BB), .VT_APPEND_CYCLES(VT_APPEND_CYCLES)) u_qnt (
    .clk, .rst, .in_valid(u_valid[U_QNT]), .in_w(u_words[U_QNT]), .take(u_take[U_QNT]),
    .release_o(u_release[U_QNT]), .done(u_done[U_QNT]), .err(u_error[U_QNT]), .err_code(u_error_code[U_QNT]),
    .req_valid(q_valid[U_QNT]), .req_write(q_write[U_QNT]), .req_addr(q_addr[U_QNT]), .req_wdata(q_wdata[U_QNT]),
    .req_wstrb(q_wstrb[U_QNT]), .req_bytes(q_bytes[U_QNT]), .req_ready(q_ready[U_QNT]), .dram_pop(q_pop[U_QNT]),
    .resp_valid(r_valid_u[U_QNT]), .resp_write(r_write), .resp_rdata(r_data),
    .act_we, .act_wrow, .act_wblk, .act_wq, .act_wscale, .act_wsub, .act_wdup, .act_wrow2,
    .rd_en(qnt_rd_en), .rd_addr(qnt_rd_addr), .rd_gnt(qnt_rd_gnt), .rd_data(qnt_rd_data));
  logic [1:0][LANES-1:0]       qnt_rd_en;
  logic [1:0][LANES-1:0][31:0] qnt_rd_addr, qnt_rd_data;
  logic [1:0]                  qnt_rd_gnt;
  assign t_rd_en[2] = qnt_rd_en[0];
  assign t_rd_en[6] = qnt_rd_en[1];
  assign t_rd_addr[2] = qnt_rd_addr[0];
  assign t_rd_addr[6] = qnt_rd_addr[1];
  assign qnt_rd_gnt = {t_rd_gnt[6], t_rd_gnt[2]};
  assign qnt_rd_data = {t_rd_data[6], t_rd_data[2]};

  otpu_vpu #(.LANES(LANES), .CLANES(COMPOSITE_COLS_PER_CYCLE)) u_vpu (
    .clk, .rst, .in_valid(u_valid[U_VPU]), .in_w(u_words[U_VPU]), .take(u_take[U_VPU]),
    .release_o(u_release[U_VPU]), .done(u_done[U_VPU]), .err(u_error[U_VPU]), .err_code(u_error_code[U_VPU]),
    .a_en(t_rd_en[3]), .a_addr(t_rd_addr[3]), .a_gnt(t_rd_gnt[3]), .a_data(t_rd_data[3]),
    .b_en(t_rd_en[4]), .b_addr(t_rd_addr[4]), .b_gnt(t_rd_gnt[4]), .b_data(t_rd_data[4]),
    .wr_en(t_wr_en[2]), .wr_addr(t_wr_addr[2]), .wr_data(t_wr_data[2]));
  assign q_valid[U_VPU] = 1'b0;
  assign q_write[U_VPU] = 1'b0;
  assign q_addr[U_VPU] = '0;
  assign q_wdata[U_VPU] = '0;
  assign q_wstrb[U_VPU] = '0;
  assign q_bytes[U_VPU] = '0;
  assign q_pop[U_VPU] = 1'b0;

  otpu_coll #(.LANES(LANES)) u_coll (
    .clk, .rst, .in_valid(u_valid[U_COLL]), .in_w(u_words[U_COLL]), .take(u_take[U_COLL]),
    .release_o(u_release[U_COLL]), .done(u_done[U_COLL]), .err(u_error[U_COLL]), .err_code(u_error_code[U_COLL]),
    .rd_en(coll_rd_en), .rd_addr(coll_rd_addr), .rd_gnt(t_rd_gnt[5] && !rld_rd), .rd_data(t_rd_data[5]),
    .wr_en(t_wr_en[3]), .wr_addr(t_wr_addr[3]), .wr_data(t_wr_data[3]));
  assign q_valid[U_COLL] = 1'b0;
  assign q_write[U_COLL] = 1'b0;
  assign q_addr[U_COLL] = '0;
  assign q_wdata[U_COLL] = '0;
  assign q_wstrb[U_COLL] = '0;
  assign q_bytes[U_COLL] = '0;
  assign q_pop[U_COLL] = 1'b0;
endmodule
